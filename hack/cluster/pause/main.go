// Command pause is the single-node cluster's pod sandbox ("pause") image: it
// holds a pod's namespaces open and waits for a signal. containerd pins it as
// its sandbox image (hack/cluster/up.sh), since no registry is reachable to
// pull registry.k8s.io/pause from.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	<-stop
}
