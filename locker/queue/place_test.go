package queue

import (
	"sync"
	"testing"
)

func TestPlaceOnlyFalls(t *testing.T) {
	p := NewPlace()
	if p.Ahead() != Unknown || p.Near() {
		t.Fatalf("a new place: %d ahead, near %v; want unknown, not near", p.Ahead(), p.Near())
	}
	if _, news := p.News(); news {
		t.Fatal("an unknown place is news")
	}
	p.Lower(5)
	p.Lower(7)
	if p.Ahead() != 5 || p.Near() {
		t.Fatalf("after 5 then 7: %d ahead, near %v; want 5, not near", p.Ahead(), p.Near())
	}
	p.Lower(1)
	if n, news := p.News(); n != 1 || !news || !p.Near() {
		t.Fatalf("after 1: News() = %d, %v, near %v; want 1, true, true", n, news, p.Near())
	}
	p.Said(1)
	if _, news := p.News(); news {
		t.Fatal("a declared place is still news")
	}
	p.Lower(0)
	if n, news := p.News(); n != 0 || !news {
		t.Fatalf("after 0: News() = %d, %v; want 0, true", n, news)
	}
	p.Reset()
	if p.Ahead() != Unknown || p.Near() {
		t.Fatal("Reset kept the place")
	}
}

func TestLowerKeepsTheLeastUnderRaces(t *testing.T) {
	p := NewPlace()
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Lower(int64(64 - i))
		}()
	}
	wg.Wait()
	if p.Ahead() != 1 {
		t.Fatalf("%d ahead after lowering to 1..64 at once, want 1", p.Ahead())
	}
}
