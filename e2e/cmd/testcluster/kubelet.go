package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// fakeKubelet does the two things a kubelet does that Deployments need to roll: it marks
// bound pods Running and Ready, and it finishes the deletion of terminating bound pods.
type fakeKubelet struct {
	client kubernetes.Interface
	lister func(namespace, name string) (*corev1.Pod, error)
	real   map[string]bool // the real nodes' names (--real-node): their kubelets run their pods
	queue  workqueue.TypedRateLimitingInterface[cache.ObjectName]
}

func runFakeKubelet(ctx context.Context, client kubernetes.Interface, realNodes map[string]bool) error {
	factory := informers.NewSharedInformerFactory(client, 0)
	pods := factory.Core().V1().Pods()
	k := &fakeKubelet{
		client: client,
		real:   realNodes,
		lister: func(ns, name string) (*corev1.Pod, error) { return pods.Lister().Pods(ns).Get(name) },
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName](),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: "fake-kubelet"}),
	}
	enqueue := func(obj interface{}) {
		if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
			k.queue.Add(cache.MetaObjectToName(p))
		}
	}
	if _, err := pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj interface{}) { enqueue(obj) },
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), pods.Informer().HasSynced) {
		return fmt.Errorf("fake kubelet: pod cache did not sync")
	}
	for i := 0; i < 4; i++ {
		go func() {
			for k.processNext(ctx) {
			}
		}()
	}
	go func() { <-ctx.Done(); k.queue.ShutDown() }()
	return nil
}

func (k *fakeKubelet) processNext(ctx context.Context) bool {
	key, quit := k.queue.Get()
	if quit {
		return false
	}
	defer k.queue.Done(key)
	if err := k.sync(ctx, key); err != nil && ctx.Err() == nil {
		k.queue.AddRateLimited(key)
		return true
	}
	k.queue.Forget(key)
	return true
}

func (k *fakeKubelet) sync(ctx context.Context, key cache.ObjectName) error {
	pod, err := k.lister(key.Namespace, key.Name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if pod.Spec.NodeName == "" || k.real[pod.Spec.NodeName] {
		return nil
	}
	if pod.DeletionTimestamp != nil {
		zero := int64(0)
		err := k.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &pod.UID}})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return err
	}
	if isRunningAndReady(pod) || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return nil
	}
	_, err = k.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, runningStatus(pod), metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		// Gone, or changed since the cache saw it: the informer brings the newer version.
		return nil
	}
	return err
}

func isRunningAndReady(pod *corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// runningStatus is the status a kubelet reports once every container started and is ready.
func runningStatus(pod *corev1.Pod) *corev1.Pod {
	p := pod.DeepCopy()
	now := metav1.NewTime(time.Now())
	p.Status.Phase = corev1.PodRunning
	p.Status.HostIP = "127.0.0.1"
	p.Status.HostIPs = []corev1.HostIP{{IP: "127.0.0.1"}}
	if p.Status.StartTime == nil {
		p.Status.StartTime = &now
	}
	set := func(t corev1.PodConditionType) {
		for i := range p.Status.Conditions {
			if p.Status.Conditions[i].Type == t {
				if p.Status.Conditions[i].Status != corev1.ConditionTrue {
					p.Status.Conditions[i].Status, p.Status.Conditions[i].LastTransitionTime = corev1.ConditionTrue, now
					p.Status.Conditions[i].Reason, p.Status.Conditions[i].Message = "", ""
				}
				return
			}
		}
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now})
	}
	for _, t := range []corev1.PodConditionType{corev1.PodReadyToStartContainers, corev1.PodInitialized,
		corev1.ContainersReady, corev1.PodReady, corev1.PodScheduled} {
		set(t)
	}
	p.Status.ContainerStatuses = nil
	for _, c := range p.Spec.Containers {
		started := true
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: "testcluster://" + c.Image, Ready: true, Started: &started,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	return p
}
