module tinystore-chat/summary

go 1.26

require tinystore.dev/tinystore v0.0.0

replace tinystore.dev/tinystore => ../../../bindings-go/go
