package dispatch

import (
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestPoolRunsEverythingAndStaysBounded(t *testing.T) {
	defer goleak.VerifyNone(t)
	p := NewPool(4, time.Minute, 10)
	var wg sync.WaitGroup
	release := make(chan struct{})
	// 10 blocking jobs: 4 on warm workers, 6 on fresh goroutines.
	for i := 0; i < 10; i++ {
		wg.Add(1)
		p.Schedule(func() { defer wg.Done(); <-release })
	}
	if w := p.Workers(); w != 4 {
		t.Fatalf("workers %d, want 4 (the max)", w)
	}
	close(release)
	wg.Wait()
	// Warm workers take new work.
	done := make(chan struct{})
	p.Schedule(func() { close(done) })
	<-done
	p.Close()
	deadline := time.Now().Add(5 * time.Second)
	for p.Workers() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("workers %d after Close", p.Workers())
		}
		time.Sleep(time.Millisecond)
	}
	ran := make(chan struct{})
	p.Schedule(func() { close(ran) }) // after Close: a fresh goroutine
	<-ran
}

func TestIdleWorkersRetire(t *testing.T) {
	p := NewPool(2, 20*time.Millisecond, 10)
	done := make(chan struct{})
	p.Schedule(func() { close(done) })
	<-done
	deadline := time.Now().Add(5 * time.Second)
	for p.Workers() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("idle worker did not retire")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestLightLoadKeepsOneWorker: after a burst of three workers, a job every
// 10 ms goes to the most recently idle worker each time, so the other two
// age out (a pool whose idle workers took turns kept all three warm).
func TestLightLoadKeepsOneWorker(t *testing.T) {
	defer goleak.VerifyNone(t)
	p := NewPool(8, 100*time.Millisecond, 10)
	defer p.Close()
	release := make(chan struct{})
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		p.Schedule(func() { defer wg.Done(); <-release })
	}
	close(release)
	wg.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for p.Workers() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d warm workers under a job every 10 ms, want 1", p.Workers())
		}
		done := make(chan struct{})
		p.Schedule(func() { close(done) })
		<-done
		time.Sleep(10 * time.Millisecond)
	}
}
