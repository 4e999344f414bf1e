module tinystore

go 1.26
