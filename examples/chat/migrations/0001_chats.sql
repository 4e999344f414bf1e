create table chats (
  id integer primary key,
  title text not null,
  -- the corpus file a replayed chat comes from ('english/greetings'), or ''
  source text not null default '',
  created_at integer not null
);
