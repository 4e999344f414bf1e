-- One answer per user message: a reply worker that restarts, or a second
-- one, cannot answer twice (its transaction fails, and its event is dropped).
create unique index one_reply on messages (reply_to);
