module tinystore-chat/summary

go 1.26

require tinystore v0.0.0

replace tinystore => ../../../bindings-go/go
