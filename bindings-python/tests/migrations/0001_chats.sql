create table chats (id integer primary key, title text not null default '');
create table messages (
    id integer primary key,
    chat_id integer not null references chats (id),
    role text not null,
    text text not null,
    created_at integer not null,
    reply_to integer
);
