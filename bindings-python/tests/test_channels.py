"""Channels from Python: CHAN-01, CHAN-02, CHAN-03, CHAN-05, CHAN-06, CHAN-07,
a blocked handler told exactly how many it missed (CHAN-02), a message
over 1 MiB refused on its call only (CHAN-07), and no handler call after
stop() with publishing going on (CHAN-05)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Generic, List, Optional, TypeVar

import pytest

import codec_models
import tinystore
from tinystore import _aio
from conftest import LOG, MIGRATIONS, Stores, told_exactly, until


@pytest.mark.cluster
async def test_chan_01_every_message_after_subscribe_arrives_in_publish_order(store: tinystore.Store) -> None:
    branch = store.channel("orders").under("a")
    got: List[Any] = []
    seqs: List[int] = []
    in_handler = 0
    most_in_handler = 0

    async def handler(m: tinystore.Message[Any]) -> None:
        nonlocal in_handler, most_in_handler
        in_handler += 1
        most_in_handler = max(most_in_handler, in_handler)
        await asyncio.sleep(0)  # an async handler is awaited before the next message
        got.append(m.value)
        seqs.append(m.seq)
        in_handler -= 1

    sub = await branch.subscribe(handler)

    async def publisher(task: int) -> None:
        for i in range(150):
            await branch.publish({"task": task, "i": i})
            if i % 10 == 0:
                await asyncio.sleep(0)

    await asyncio.gather(*(publisher(t) for t in range(4)))
    await until(lambda: len(got) == 600, what="600 messages")
    for t in range(4):
        assert [g["i"] for g in got if g["task"] == t] == list(range(150))
    assert seqs == list(range(1, 601))
    assert most_in_handler == 1
    await sub.stop()


@pytest.mark.cluster
async def test_chan_01_pipelined_publishes_keep_their_order(store: tinystore.Store) -> None:
    branch = store.channel("orders").under("pipelined")
    got: List[int] = []
    sub = await branch.subscribe(lambda m: got.append(m.value))
    sent = [branch.publish(i) for i in range(500)]  # each leaves at its call: all in flight at once
    await until(lambda: len(got) == 500, what="500 messages, before any publish was awaited")
    await asyncio.gather(*sent)
    assert got == list(range(500))
    await sub.stop()


async def test_chan_01_dataclasses_nested_lists_and_optionals_arrive_as_their_type(store: tinystore.Store) -> None:
    @dataclass
    class Author:
        name: str
        tags: List[str] = field(default_factory=list)

    @dataclass
    class Post:
        id: int
        author: Author
        replies: List[Author]
        edited: Optional[Author] = None
        score: float = 0.0

    posts = store.channel("posts", Post)
    got: List[Post] = []
    sub = await posts.under(1).subscribe(lambda m: got.append(m.value))
    sent = [
        Post(id=1, author=Author("ana", ["a"]), replies=[Author("bo"), Author("cy", ["x", "y"])]),
        Post(id=2, author=Author("bo"), replies=[], edited=Author("bo", ["late"]), score=3),
    ]
    for p in sent:
        await posts.under(1).publish(p)
    await until(lambda: len(got) == 2)
    assert got == sent
    assert isinstance(got[1].score, float) and isinstance(got[1].edited, Author)
    await sub.stop()


@dataclass
class Tree:
    name: str
    children: List[Tree]
    parent: Optional[Tree] = None


T = TypeVar("T")


@dataclass
class Box(Generic[T]):
    item: T
    items: List[T]


async def test_chan_01_dataclasses_that_hold_themselves_and_generic_ones_arrive_as_their_type(
    store: tinystore.Store,
) -> None:
    trees = store.channel("trees", Tree)
    boxes = store.channel("boxes", Box[Tree])
    got: List[Any] = []
    subs = [await trees.subscribe(lambda m: got.append(m.value)), await boxes.subscribe(lambda m: got.append(m.value))]
    tree = Tree("a", [Tree("b", []), Tree("c", [Tree("d", [])], parent=Tree("a", []))])
    box = Box(Tree("x", []), [Tree("y", []), Tree("z", [Tree("w", [])])])
    await trees.publish(tree)
    await boxes.publish(box)
    await until(lambda: len(got) == 2)
    assert got == [tree, box]
    assert isinstance(got[1].items[1].children[0], Tree)
    for sub in subs:
        await sub.stop()


async def test_chan_01_field_types_are_looked_up_in_the_dataclass_module_first(store: tinystore.Store) -> None:
    @dataclass
    class Item:  # the caller's own, unrelated to codec_models.Item
        label: str

    T = TypeVar("T")  # and its own T  # noqa: F841

    def make_node() -> Any:
        @dataclass
        class Node:  # made in a function, and holding itself
            v: int
            parent: Optional[Node] = None

        return Node

    Node = make_node()
    channels = [
        store.channel("orders", codec_models.Order),
        store.channel("crates", codec_models.Crate[codec_models.Leaf]),
        store.channel("nodes", Node),
    ]
    sent = [
        codec_models.Order(1, [codec_models.Item("abc", 2)]),
        codec_models.Crate(codec_models.Leaf("a"), [codec_models.Leaf("b")]),
        Node(1, Node(2)),
    ]
    got: List[Any] = []
    subs = [await ch.subscribe(lambda m: got.append(m.value)) for ch in channels]
    for ch, v in zip(channels, sent):
        await ch.publish(v)
    await until(lambda: len(got) == 3)
    assert got == sent
    assert isinstance(got[0].items[0], codec_models.Item) and isinstance(got[1].items[0], codec_models.Leaf)
    assert isinstance(got[2].parent, Node)
    for sub in subs:
        await sub.stop()


@pytest.mark.cluster
async def test_chan_02_publisher_never_waits_and_a_frozen_reader_is_told_the_exact_count(stores: Stores) -> None:
    store = await stores.open()
    branch = store.channel("busy").under(7)
    frozen = await branch.messages()  # subscribed, and never read while publishing
    # Cluster: fewer past the log, as each publish waits for the stream's
    # replicas (about 3 ms one at a time here).
    total = LOG + (300 if stores.mode == "cluster" else 2500)
    started = time.monotonic()
    for i in range(total):
        if i == LOG:
            behind = time.monotonic()  # from here the reader's queue is full: it falls behind
        await branch.publish(i)
    took = time.monotonic() - started
    if stores.mode == "cluster":
        # A publish waits for the stream's replicas (docs/cluster.md, "Publish
        # latency"), so one machine's bound does not apply; publishes must not
        # slow down once the reader is behind.
        keeping_up, falling_behind = (behind - started) / LOG, (took - (behind - started)) / (total - LOG)
        assert falling_behind < 2 * keeping_up + 0.001, f"{falling_behind * 1e3:.2f} ms a publish behind, {keeping_up * 1e3:.2f} before"
    else:
        assert took < 5, f"publishing {total} messages with a frozen reader took {took:.1f}s"

    seen: List[Any] = []
    seqs: List[int] = []
    while not seen or seen[-1] != total - 1:
        x = await asyncio.wait_for(frozen.__anext__(), 5)
        if isinstance(x, tinystore.Missed):
            seen.append(x)
        else:
            seen.append(x.value)
            seqs.append(x.seq)
    missed = told_exactly(seen, list(range(total)))
    assert seqs[0] == missed.count + 1  # the branch's sequence says the same
    if stores.mode == "owned":
        assert seen[0] == tinystore.Missed(total - LOG, "behind")
    await frozen.aclose()


@pytest.mark.cluster
async def test_c1_lag_is_not_the_end_one_on_missed_with_count_n_then_the_next_message(stores: Stores) -> None:
    store = await stores.open()
    branch = store.channel("lag").under("chat")
    n = 37
    release = asyncio.Event()
    seen: List[Any] = []

    async def handler(m: tinystore.Message[int]) -> None:
        seen.append(m.value)
        if m.value == 0:
            await release.wait()  # the handler blocks

    sub = await branch.subscribe(handler, on_missed=seen.append)
    await branch.publish(0)
    await until(lambda: seen == [0], what="the handler to block on message 0")
    last = LOG + n
    for i in range(1, last + 1):
        await branch.publish(i)
    await until(stores.forwarded, what="the owner to send what it has")
    release.set()
    await until(lambda: seen[-1] == last, what="the last message")
    told_exactly(seen, list(range(last + 1)))
    if stores.mode == "owned":  # connected, the client's inbox may keep a few more
        assert seen[:3] == [0, tinystore.Missed(n, "behind"), n + 1]
    await branch.publish("still here")  # the subscription lives on
    await until(lambda: seen[-1] == "still here")
    await sub.stop()


@pytest.mark.cluster
async def test_chan_03_a_transaction_publishes_at_commit_and_a_reader_can_read_what_it_announces(store: tinystore.Store) -> None:
    db = await store.database("chat", migrations=MIGRATIONS)
    events = store.channel("chat-events")
    await db.exec("insert into chats (id) values (?)", 1)
    seen: List[Any] = []

    async def handler(m: tinystore.Message[Any]) -> None:
        rows = await db.query("select text from messages where id = ?", m.value["id"])
        seen.append((m.value["n"], rows))

    sub = await events.under(1).subscribe(handler)

    async def save(tx: tinystore.SqlTx) -> None:
        reply = await tx.exec(
            "insert into messages (chat_id, role, text, created_at) values (?, 'assistant', ?, ?)", 1, "hello", 0
        )
        await tx.with_(events).under(1).publish({"id": reply.last_insert_rowid, "n": 1})
        await tx.with_(events).under(1).publish({"id": reply.last_insert_rowid, "n": 2})
        await asyncio.sleep(0.05)
        assert seen == []  # nothing before the commit

    await db.tx(save)
    await until(lambda: len(seen) == 2)
    assert seen == [(1, [{"text": "hello"}]), (2, [{"text": "hello"}])]
    await sub.stop()


@pytest.mark.cluster
async def test_chan_03_a_rollback_drops_what_the_transaction_published(store: tinystore.Store) -> None:
    db = await store.database("chat", migrations=MIGRATIONS)
    events = store.channel("chat-events")
    got: List[Any] = []
    sub = await events.under(2).subscribe(lambda m: got.append(m.value))

    async def failing(tx: tinystore.SqlTx) -> None:
        await tx.exec("insert into chats (id) values (?)", 2)
        await tx.with_(events).under(2).publish("rolled back")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):  # the function's own error, unchanged
        await db.tx(failing)
    assert await db.query("select id from chats where id = 2") == []
    await events.under(2).publish("probe")
    await until(lambda: got == ["probe"])
    await sub.stop()


@pytest.mark.cluster
async def test_chan_05_stop_from_inside_the_handler_twice_and_after_close(stores: Any) -> None:
    store = await stores.open()
    branch = store.channel("stops").under(1)
    got: List[int] = []
    sub: Optional[tinystore.Subscription[int]] = None

    async def handler(m: tinystore.Message[int]) -> None:
        got.append(m.value)
        assert sub is not None
        await sub.stop()  # from inside the handler
        await sub.stop()

    sub = await branch.subscribe(handler)
    for i in range(10):
        await branch.publish(i)
    await until(lambda: not sub.active)
    await asyncio.sleep(0.05)
    assert got == [0]

    other = await branch.subscribe(lambda m: None)
    await store.close()  # closing the store stops its subscriptions
    await asyncio.wait_for(other.wait(), 5)
    assert not other.active
    await other.stop()  # after the store closed: no error
    with pytest.raises(tinystore.ClosedError):
        await branch.publish(1)


@pytest.mark.cluster
async def test_c16_stop_means_stop_no_handler_call_starts_after_stop_returned(store: tinystore.Store) -> None:
    branch = store.channel("firehose").under(1)
    for stop_from_thread in (False, True):
        calls = 0
        after_stop = 0
        stopped = False
        done = False

        def handler(m: tinystore.Message[int]) -> None:
            nonlocal calls, after_stop
            calls += 1
            if stopped:
                after_stop += 1

        sub = await branch.subscribe(handler)

        async def publish_continuously() -> None:
            i = 0
            while not done:
                await branch.publish(i)
                i += 1
                if i % 8 == 0:
                    await asyncio.sleep(0)

        publisher = asyncio.ensure_future(publish_continuously())
        await until(lambda: calls >= 200, what="200 handler calls")
        if stop_from_thread:
            loop = asyncio.get_running_loop()

            def stop_in_thread() -> None:
                nonlocal stopped
                asyncio.run_coroutine_threadsafe(sub.stop(), loop).result()
                stopped = True

            await asyncio.to_thread(stop_in_thread) if hasattr(asyncio, "to_thread") else None
        else:
            await sub.stop()
            stopped = True
        await asyncio.sleep(0.2)  # keep publishing after stop
        done = True
        await publisher
        assert after_stop == 0
        assert calls >= 200


@pytest.mark.cluster
async def test_chan_06_a_branch_gets_only_its_messages_and_7_and_str_7_are_one_branch(store: tinystore.Store) -> None:
    ch = store.channel("rooms")
    seven: List[Any] = []
    everything: List[Any] = []
    sub7 = await ch.under(7).subscribe(lambda m: seven.append((m.branch, m.value)))
    all_ = await ch.subscribe(lambda m: everything.append((m.branch, m.value)), recursive=True)
    await ch.under(7).publish("int")
    await ch.under("7").publish("str")
    await ch.under(8).publish("other")
    await ch.under(7).under("x").publish("below")
    await ch.publish("root")
    await until(lambda: len(everything) == 5)
    await asyncio.sleep(0.02)
    assert seven == [(("7",), "int"), (("7",), "str")]
    assert sorted(everything) == sorted(
        [(("7",), "int"), (("7",), "str"), (("8",), "other"), (("7", "x"), "below"), ((), "root")]
    )
    assert ch.under(7).path == ("7",) and ch.under("07").path == ("07",)
    await sub7.stop()
    await all_.stop()


@pytest.mark.cluster
async def test_chan_06_keys_out_of_rule_are_refused_when_the_branch_is_made(store: tinystore.Store) -> None:
    ch = store.channel("rooms")
    with pytest.raises(tinystore.InvalidError):
        ch.under("")
    with pytest.raises(ValueError):
        ch.under("k" * 1025)
    # No UTF-8 for it: a tinystore error, not the codec's.
    with pytest.raises(tinystore.InvalidError, match="lone surrogate"):
        ch.under("a\ud800")
    with pytest.raises(tinystore.InvalidError, match="lone surrogate"):
        await store.lock("keys").try_hold("a\udc00").__aenter__()
    ch.under("k" * 1024)
    with pytest.raises(TypeError):
        ch.under(1.5)  # type: ignore[arg-type]


@pytest.mark.cluster
async def test_chan_07_a_message_over_1_mib_is_refused_and_nothing_is_published(store: tinystore.Store) -> None:
    branch = store.channel("big").under(1)
    got: List[tinystore.Message[str]] = []
    sub = await branch.subscribe(got.append)
    exactly = "a" * ((1 << 20) - 2)  # with its two quotes, 1 MiB of JSON
    with pytest.raises(tinystore.LimitError, match="1 MiB"):
        await branch.publish(exactly + "a")
    await branch.publish(exactly)
    await branch.publish("small")
    await until(lambda: len(got) == 2)
    assert [len(m.value) for m in got] == [len(exactly), 5]
    assert [m.seq for m in got] == [1, 2]  # the refused one took no place
    await sub.stop()


@pytest.mark.cluster
async def test_chan_07_a_message_nested_over_100_deep_is_refused_and_one_100_deep_arrives(store: tinystore.Store) -> None:
    def nested(depth: int) -> Any:
        value: Any = "[[[["  # brackets in a string are not nesting
        for _ in range(depth):
            value = [value]
        return value

    branch = store.channel("deep").under(1)
    got: List[tinystore.Message[Any]] = []
    sub = await branch.subscribe(got.append)
    with pytest.raises(tinystore.LimitError, match="100 deep"):
        await branch.publish(nested(101))
    # Deeper than Python's encoder can go: the same limit, not a RecursionError.
    with pytest.raises(tinystore.LimitError, match="100 deep"):
        await branch.publish(nested(5000))
    await branch.publish(nested(100))
    await until(lambda: len(got) == 1)
    assert got[0].value == nested(100)
    assert got[0].seq == 1  # the refused one took no place
    await sub.stop()


async def test_a_handler_that_raises_goes_to_on_error_and_the_subscription_goes_on(store: tinystore.Store) -> None:
    branch = store.channel("errors").under(1)
    got: List[int] = []

    def handler(m: tinystore.Message[int]) -> None:
        if m.value == 1:
            raise KeyError("one")
        got.append(m.value)

    errors = await _errors_while_0_1_2_are_handled(branch, handler, got)
    assert len(errors) == 1 and isinstance(errors[0], KeyError)


async def _errors_while_0_1_2_are_handled(branch: Any, handler: Any, got: List[int]) -> List[Exception]:
    """Publishes 0, 1 and 2 to a subscription with ``handler`` (which fails
    on 1); what ``on_error`` got once 0 and 2 arrived, the subscription
    still running."""
    errors: List[Exception] = []
    sub = await branch.subscribe(handler, on_error=errors.append)
    for i in range(3):
        await branch.publish(i)
    await until(lambda: got == [0, 2])
    assert sub.active
    await sub.stop()
    return errors


async def test_a_handler_that_lets_a_cancellation_out_goes_to_on_error_and_the_subscription_goes_on(
    store: tinystore.Store,
) -> None:
    branch = store.channel("errors").under(3)
    got: List[int] = []

    async def handler(m: tinystore.Message[int]) -> None:
        if m.value == 1:
            elsewhere = asyncio.ensure_future(asyncio.sleep(10))
            asyncio.get_running_loop().call_soon(elsewhere.cancel)
            await elsewhere  # cancelled by someone else: CancelledError here
        got.append(m.value)

    errors = await _errors_while_0_1_2_are_handled(branch, handler, got)
    assert len(errors) == 1 and isinstance(errors[0], RuntimeError)
    assert isinstance(errors[0].__cause__, asyncio.CancelledError) and "CancelledError" in str(errors[0])


async def test_an_on_error_that_lets_a_cancellation_out_is_reported_and_the_subscription_goes_on(
    store: tinystore.Store,
) -> None:
    branch = store.channel("errors").under(4)
    got: List[int] = []
    told: List[Any] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _, context: told.append(context["exception"]))

    def handler(m: tinystore.Message[int]) -> None:
        if m.value == 1:
            raise KeyError("one")
        got.append(m.value)

    async def on_error(e: Exception) -> None:
        elsewhere = asyncio.ensure_future(asyncio.sleep(10))  # reporting it somewhere...
        loop.call_soon(elsewhere.cancel)  # ...cancelled by someone else
        await elsewhere

    try:
        sub = await branch.subscribe(handler, on_error=on_error)
        for i in range(3):
            await branch.publish(i)
        await until(lambda: got == [0, 2])
        assert sub.active
        assert len(told) == 1 and isinstance(told[0], RuntimeError) and "on_error" in str(told[0])
        await sub.stop()
    finally:
        loop.set_exception_handler(None)


def test_a_loop_ends_when_a_handler_swallows_its_cancellation(tmp_path: Any) -> None:
    # The store outlives the loop (a module global), and the handler awaits
    # when asyncio.run ends: it catches the CancelledError to clean up, or
    # turns it into its own error. The subscription's task ends anyway.
    script = tmp_path / "swallow.py"
    script.write_text(
        "import asyncio, sys, tinystore\n"
        "STORES = []\n"
        "async def main():\n"
        f"    store = await tinystore.open({str(tmp_path / 's')!r})\n"
        "    STORES.append(store)\n"
        "    started = asyncio.Event()\n"
        "    async def handler(m):\n"
        "        started.set()\n"
        "        try:\n"
        "            await asyncio.sleep(30)\n"
        "        except asyncio.CancelledError:\n"
        "            if m.value == 'convert':\n"
        "                raise RuntimeError('aborted')\n"
        "    await store.channel('c').subscribe(handler, on_error=lambda e: None)\n"
        "    await store.channel('c').publish(sys.argv[1])\n"
        "    await started.wait()\n"
        "asyncio.run(main())\n"
        "print('ended')\n"
    )
    for how in ("swallow", "convert"):
        out = subprocess.run([sys.executable, str(script), how], capture_output=True, text=True, timeout=30)
        assert out.returncode == 0 and "ended" in out.stdout, (how, out.returncode, out.stderr[-2000:])


async def test_a_handler_error_without_on_error_reaches_the_loops_exception_handler(store: tinystore.Store) -> None:
    branch = store.channel("errors").under(2)
    reported: List[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: reported.append(ctx))
    got: List[int] = []

    def handler(m: tinystore.Message[int]) -> None:
        if m.value == 0:
            raise ValueError("zero")
        got.append(m.value)

    sub = await branch.subscribe(handler)
    await branch.publish(0)
    await branch.publish(1)
    await until(lambda: got == [1])
    assert len(reported) == 1 and isinstance(reported[0]["exception"], ValueError)
    await sub.stop()


async def test_async_for_reads_a_branch_in_order(store: tinystore.Store) -> None:
    branch = store.channel("iter").under(3)
    msgs = await branch.messages()
    for i in range(5):
        await branch.publish({"i": i})
    got = []
    async for m in msgs:
        assert isinstance(m, tinystore.Message)
        got.append(m.value["i"])
        if len(got) == 5:
            break
    assert got == list(range(5))
    await msgs.aclose()
    # Connected, the owner drops that subscription a moment later.
    await until(lambda: store.status()["subscriptions"] == 0, what="the first iterator's subscription to end")

    async def reader() -> List[Any]:
        out = []
        async for m in branch:  # subscribes at the first step
            out.append(m.value)
            if m.value == "last":
                return out
        return out

    task = asyncio.ensure_future(reader())
    await until(lambda: store.status()["subscriptions"] == 1, what="the iterator to subscribe")
    await branch.publish("first")
    await branch.publish("last")
    assert await asyncio.wait_for(task, 5) == ["first", "last"]


async def test_a_value_json_cannot_carry_is_refused_before_publishing(store: tinystore.Store) -> None:
    branch = store.channel("values").under(1)
    with pytest.raises(TypeError):
        await branch.publish(object())
    with pytest.raises(ValueError):
        await branch.publish(float("nan"))


async def test_a_value_that_holds_itself_is_refused_before_publishing(store: tinystore.Store) -> None:
    branch = store.channel("values").under(2)
    got: List[Any] = []
    sub = await branch.subscribe(lambda m: got.append(m.value))
    looped: List[Any] = [1]
    looped.append(looped)
    with pytest.raises(ValueError, match="holds itself"):
        await branch.publish({"a": looped})
    # A failed encoding leaves nothing behind that refuses the next values
    # (json's circular check marks the containers it is inside).
    for i in range(200):
        with pytest.raises(TypeError):
            await branch.publish({"a": [i, {"b": object()}]})
        await branch.publish({"a": [i, {"b": i}]})
    with pytest.raises(ValueError, match="lone surrogate"):
        await branch.publish({"text": "a\ud800b"})
    await branch.publish("probe")
    await until(lambda: len(got) == 201, what="every value")
    assert got[-1] == "probe" and got[:200] == [{"a": [i, {"b": i}]} for i in range(200)]
    await sub.stop()


def test_a_value_that_holds_itself_is_refused_under_a_raised_recursion_limit(tmp_path: Any) -> None:
    # The circular check, not the recursion limit, stops it: with a limit
    # raised past what the C stack holds, recursing would crash the process.
    script = tmp_path / "cycle.py"
    script.write_text(
        "import asyncio, sys, tinystore\n"
        "sys.setrecursionlimit(1_000_000)\n"
        "async def main():\n"
        f"    async with tinystore.open({str(tmp_path / 's')!r}) as store:\n"
        "        v = []\n"
        "        v.append(v)\n"
        "        try:\n"
        "            await store.channel('c').publish(v)\n"
        "        except ValueError as e:\n"
        "            print('refused:', e)\n"
        "asyncio.run(main())\n"
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
    assert "refused: this value holds itself" in out.stdout


async def test_chan_01_values_arrive_as_json_loads_makes_them(store: tinystore.Store) -> None:
    # Decoded in native code with json's own scanner: the same values as
    # json.loads, for what another language's JSON may hold too.
    branch = store.channel("values").under(3)
    sent: List[Any] = [
        {"id": 2**70, "neg": -(2**64), "f": 0.1, "e": 1e300, "small": 5e-324},
        "naïve ✓ 🙂",
        {"nested": [1, [2, {"k": None}], True, False]},
        [],
        "",
        0,
    ]
    got: List[Any] = []
    sub = await branch.subscribe(lambda m: got.append(m.value))
    for v in sent:
        await branch.publish(v)
    await until(lambda: len(got) == len(sent), what="every value")
    assert got == sent
    assert type(got[0]["id"]) is int and type(got[0]["f"]) is float
    await sub.stop()


async def test_chan_07_raw_bytes_that_are_not_json_are_refused_and_the_rest_arrive(store: tinystore.Store) -> None:
    # Published raw (as another language's raw publish can): the store
    # refuses what is not one JSON value, owned as connected, so no
    # subscriber gets a message it cannot decode. Spaces around a value are
    # JSON too.
    branch = store.channel("raw").under(1)
    got: List[Any] = []
    sub = await branch.subscribe(got.append)
    for data in (b"not json", b' {"a": 1} ', b"[1, 2", b'"after"'):
        try:
            r = branch._native.publish(data)
        except tinystore.InvalidError as e:
            assert data in (b"not json", b"[1, 2") and "one JSON value" in str(e)
            continue
        assert data not in (b"not json", b"[1, 2"), "refused"
        if r is not None:
            await _aio.wait(r)
    await until(lambda: len(got) == 2, what="the two JSON messages")
    assert [m.value for m in got] == [{"a": 1}, "after"]
    assert [m.seq for m in got] == [1, 2]  # the refused ones took no place
    await sub.stop()


@dataclass
class Ev:
    id: int


async def test_chan_01_a_message_not_of_the_channels_type_is_reported_with_its_seq_and_the_subscription_goes_on(
    store: tinystore.Store,
) -> None:
    # Another program publishes to the channel without sharing its type.
    typed = store.channel("typed-ev", Ev).under(1)
    raw = store.channel("typed-ev").under(1)
    got: List[Ev] = []
    errors: List[BaseException] = []
    sub = await typed.subscribe(lambda m: got.append(m.value), on_error=errors.append)
    it = await typed.messages()
    await typed.publish(Ev(1))
    await raw.publish({"idd": 2})
    await typed.publish(Ev(3))
    await until(lambda: len(got) + len(errors) == 3, what="every message or its error")
    assert got == [Ev(1), Ev(3)]
    assert [type(e) for e in errors] == [TypeError]
    assert (await it.__anext__()).value == Ev(1)
    with pytest.raises(TypeError) as raised:
        await it.__anext__()
    assert (await it.__anext__()).value == Ev(3), "the iterator goes on at the next message"
    if sys.version_info >= (3, 11):
        for e in (errors[0], raised.value):
            assert any("message 2 of branch ('1',)" in n for n in e.__notes__), e.__notes__
    await it.aclose()
    await sub.stop()


async def test_publish_from_a_thread_without_an_event_loop_raises_before_publishing(store: tinystore.Store) -> None:
    branch = store.channel("threads").under(1)
    got: List[Any] = []
    sub = await branch.subscribe(lambda m: got.append(m.value))

    def publish_without_a_loop() -> Optional[BaseException]:
        try:
            branch.publish("from a thread")
        except RuntimeError as e:
            return e
        return None

    err = await asyncio.to_thread(publish_without_a_loop)
    await branch.publish("probe")
    await until(lambda: "probe" in got, what="the probe")
    await asyncio.sleep(0.05)
    assert got == ["probe"]  # nothing was published by the call that raised
    assert isinstance(err, RuntimeError) and "event loop" in str(err) and "run_coroutine_threadsafe" in str(err)
    await sub.stop()


@dataclass
class ChatEvent:
    kind: str
    id: int


@dataclass
class OtherEvent:
    kind: str
    id: int


@dataclass
class LateEvent(ChatEvent):
    late: bool = True


async def test_a_typed_channel_refuses_a_value_of_another_type_before_publishing(store: tinystore.Store) -> None:
    events = store.channel("typed", ChatEvent)
    got: List[Any] = []
    sub = await events.under(1).subscribe(lambda m: got.append(m.value))
    for wrong in ({"kind": "message", "id": 1}, OtherEvent("message", 1), "message", None, [ChatEvent("message", 1)]):
        with pytest.raises(tinystore.InvalidError, match="ChatEvent") as e:
            await events.under(1).publish(wrong)  # type: ignore[arg-type]
        assert ("None" if wrong is None else type(wrong).__name__) in str(e.value)
    db = await store.database("typed")
    with pytest.raises(tinystore.InvalidError, match="ChatEvent"):
        await db.tx(lambda tx: tx.with_(events).under(1).publish({"kind": "message", "id": 1}))

    # What the type allows goes through: a subclass, either side of an
    # Optional, ints where floats are declared, items of a declared list.
    await events.under(1).publish(LateEvent("message", 2))
    maybe = store.channel("maybe", Optional[ChatEvent])
    await maybe.publish(ChatEvent("message", 3))
    with pytest.raises(tinystore.InvalidError, match=r"ChatEvent \| None; got OtherEvent"):
        await maybe.publish(OtherEvent("message", 3))
    await store.channel("ratio", float).publish(1)
    with pytest.raises(tinystore.InvalidError, match="float"):
        await store.channel("ratio", float).publish("1.0")
    lists = store.channel("lists", List[ChatEvent])
    await lists.publish([ChatEvent("message", 3)])
    with pytest.raises(tinystore.InvalidError, match="ChatEvent"):
        await lists.publish([ChatEvent("message", 3), {"kind": "message", "id": 4}])
    await until(lambda: len(got) == 1, what="the subclass")
    await asyncio.sleep(0.05)
    assert got == [ChatEvent("message", 2)]  # read back as the channel's type; nothing refused was published
    await sub.stop()
