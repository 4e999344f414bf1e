alter table chats add column summary text;
alter table chats add column summary_fence text not null default '';
