package main

import (
	_ "time/tzdata"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"

	_ "go.etcd.io/etcd/server/v3/embed"
	_ "k8s.io/client-go/kubernetes"
)

// runComponent runs one control-plane component in this process and returns its exit code.
func runComponent(name string, args []string) int {
	switch name {
	case "apiserver":
		c := apiserver.NewAPIServerCommand()
		c.SetArgs(args)
		return cli.Run(c)
	case "controller-manager":
		c := controllermanager.NewControllerManagerCommand()
		c.SetArgs(args)
		return cli.Run(c)
	case "scheduler":
		c := scheduler.NewSchedulerCommand()
		c.SetArgs(args)
		return cli.Run(c)
	}
	return -1
}
