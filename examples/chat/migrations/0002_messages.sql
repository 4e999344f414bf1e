create table messages (
  id integer primary key,
  chat_id integer not null references chats (id),
  role text not null check (role in ('user', 'assistant')),
  text text not null,
  created_at integer not null,
  -- the user message an assistant message answers
  reply_to integer references messages (id),
  -- chosen by the browser: a retried POST saves its message once
  client_id text unique
);
create index messages_of_chat on messages (chat_id, id);
