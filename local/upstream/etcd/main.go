// Command etcd is upstream etcd's server: its own server/main.go only calls etcdmain.Main, and server/go.mod has
// local replaces, so `go install go.etcd.io/etcd/server/v3` is refused (etcd#18501). This wrapper is that main.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
