// Module tools holds the repository's maintenance programs (see modcheck). It is
// not part of the workspace: run it with GOWORK=off, as the Makefile does.
module github.com/informer-go/informer/tools

go 1.26.0

require golang.org/x/mod v0.42.0
