// apiclient drives an admission webhook the way kube-apiserver calls one: Go's net/http client over
// HTTP/1.1 (HTTP/2 is off for webhooks, kubernetes#82090), a connection per concurrent call, up to 25
// idle connections kept (k8s.io/apimachinery/pkg/util/net SetTransportDefaults: MaxIdleConnsPerHost 25,
// IdleConnTimeout 90 s) and a per-call timeout (the webhook's timeoutSeconds, 10 s by default).
//
// Modes: closed (N connections, each sends as soon as its last answer came back), open (a fixed rate;
// latency counted from the scheduled send, so queueing is not hidden), newconn (no keep-alive: a TLS
// handshake per call), trickle (N closed-loop connections while M other clients send their headers one
// byte at a time and never finish), burst (a Job's -count pods created as kube-controller-manager's Job
// controller creates them: the time to the last answer). One JSON line of figures on stdout.
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

type result struct {
	Requests    int      `json:"requests"`
	Errors      int      `json:"errors"`
	RPS         float64  `json:"rps"`
	P50         float64  `json:"p50_ms"`
	P99         float64  `json:"p99_ms"`
	Max         float64  `json:"max_ms"`
	OverOne     int      `json:"over_1s"`
	ErrorSample []string `json:"error_sample"`
	Trickled    int      `json:"trickle_closed_by_server"`
	// connections the client dialed (each a TLS handshake), and, per tenth of the run by scheduled
	// send, the calls slower than 10 ms: a tail at the start is the pool filling, one spread out is not
	Dials      int   `json:"dials"`
	SlowTenths []int `json:"slow_by_tenth"`
	// where a slow call's time went: waiting for a connection (busy ones and dials), and the sender
	// itself behind its schedule (the client starved of CPU, not the server slow)
	ConnWaitP99 float64 `json:"conn_wait_p99_ms"`
	SendLagMax  float64 `json:"send_lag_max_ms"`
}

type recorder struct {
	mu        sync.Mutex
	latencies []time.Duration
	errors    int
	samples   []string
	dials     int
	slow      [10]int
	connWaits []time.Duration
}

func (r *recorder) add(latency time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.errors++
		if len(r.samples) < 3 {
			r.samples = append(r.samples, err.Error())
		}
		return
	}
	r.latencies = append(r.latencies, latency)
}

func main() {
	url := flag.String("url", "", "https://host:port/path")
	caFile := flag.String("ca", "", "CA bundle")
	bodyFile := flag.String("body", "", "request body (an AdmissionReview)")
	mode := flag.String("mode", "closed", "closed | open | newconn | trickle | burst")
	count := flag.Int("count", 1000, "pods of the Job created (burst)")
	conns := flag.Int("conns", 8, "concurrent connections (closed, newconn, trickle)")
	rate := flag.Float64("rate", 1000, "requests per second (open)")
	seconds := flag.Float64("seconds", 5, "duration")
	timeout := flag.Duration("timeout", 10*time.Second, "per-call timeout")
	trickle := flag.Int("trickle", 32, "slow clients (trickle)")
	flag.Parse()

	pem, err := os.ReadFile(*caFile)
	must(err)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	body, err := os.ReadFile(*bodyFile)
	must(err)
	tlsConfig := &tls.Config{RootCAs: pool, ServerName: "localhost"}
	transport := &http.Transport{
		TLSClientConfig:     tlsConfig,
		MaxIdleConnsPerHost: 25,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
		ForceAttemptHTTP2:   false,
		TLSNextProto:        map[string]func(string, *tls.Conn) http.RoundTripper{},
		DisableKeepAlives:   *mode == "newconn",
	}
	client := &http.Client{Transport: transport, Timeout: *timeout}
	rec := &recorder{}
	duration := time.Duration(*seconds * float64(time.Second))
	start := time.Now()
	call := func(scheduled time.Time) {
		var asked time.Time
		trace := &httptrace.ClientTrace{
			GetConn: func(string) { asked = time.Now() },
			GotConn: func(info httptrace.GotConnInfo) {
				rec.mu.Lock()
				defer rec.mu.Unlock()
				rec.connWaits = append(rec.connWaits, time.Since(asked))
				if !info.Reused {
					rec.dials++
				}
			},
		}
		request, err := http.NewRequestWithContext(
			httptrace.WithClientTrace(context.Background(), trace), "POST", *url, bytes.NewReader(body))
		must(err)
		request.Header.Set("Content-Type", "application/json")
		response, err := client.Do(request)
		if err == nil {
			payload, readErr := io.ReadAll(response.Body)
			response.Body.Close()
			if readErr != nil {
				err = readErr
			} else if response.StatusCode != 200 || !bytes.Contains(payload, []byte(`"allowed":true`)) {
				err = fmt.Errorf("HTTP %d: %.120s", response.StatusCode, payload)
			}
		}
		latency := time.Since(scheduled)
		rec.add(latency, err)
		if latency > 10*time.Millisecond {
			tenth := int(10 * scheduled.Sub(start) / duration)
			rec.mu.Lock()
			rec.slow[max(0, min(9, tenth))]++
			rec.mu.Unlock()
		}
	}
	end := start.Add(duration)
	var wg sync.WaitGroup
	trickleClosed := 0
	var sendLag time.Duration
	var trickleMu sync.Mutex
	stopTrickle := make(chan struct{})
	switch *mode {
	case "closed", "newconn", "trickle":
		if *mode == "trickle" {
			for i := 0; i < *trickle; i++ {
				go func() {
					for {
						select {
						case <-stopTrickle:
							return
						default:
						}
						if slowClient(*url, tlsConfig, stopTrickle) {
							trickleMu.Lock()
							trickleClosed++
							trickleMu.Unlock()
						}
					}
				}()
			}
			time.Sleep(500 * time.Millisecond) // the slow clients are in before the measured load starts
			start = time.Now()
			end = start.Add(duration)
		}
		for i := 0; i < *conns; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(end) {
					call(time.Now())
				}
			}()
		}
	case "open":
		interval := time.Duration(float64(time.Second) / *rate)
		for next := start; next.Before(end); next = next.Add(interval) {
			if wait := time.Until(next); wait > 0 {
				time.Sleep(wait)
			} else if -wait > sendLag {
				sendLag = -wait
			}
			wg.Add(1)
			go func(scheduled time.Time) {
				defer wg.Done()
				call(scheduled)
			}(next)
		}
	case "burst":
		// the Job controller creating a Job's pods (pkg/controller/job/job_controller.go manageJob): at
		// most MaxPodCreateDeletePerSync (500) per sync, each sync in slowStartBatch's batches of 1, 2, 4,
		// ... (SlowStartInitialBatchSize 1), a batch's creations side by side and the next batch once all
		// are answered; each creation is one call to the webhook
		for left := *count; left > 0; {
			inSync := min(left, 500)
			left -= inSync
			for size := 1; inSync > 0; size *= 2 {
				batch := min(size, inSync)
				inSync -= batch
				var answered sync.WaitGroup
				for i := 0; i < batch; i++ {
					answered.Add(1)
					go func() {
						defer answered.Done()
						call(time.Now())
					}()
				}
				answered.Wait()
			}
		}
	default:
		must(fmt.Errorf("unknown mode %q", *mode))
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(stopTrickle)
	sort.Slice(rec.latencies, func(i, j int) bool { return rec.latencies[i] < rec.latencies[j] })
	out := result{Requests: len(rec.latencies), Errors: rec.errors, ErrorSample: rec.samples, Trickled: trickleClosed}
	out.Dials, out.SlowTenths = rec.dials, rec.slow[:]
	out.SendLagMax = float64(sendLag.Microseconds()) / 1000
	if n := len(rec.connWaits); n > 0 {
		sort.Slice(rec.connWaits, func(i, j int) bool { return rec.connWaits[i] < rec.connWaits[j] })
		out.ConnWaitP99 = float64(rec.connWaits[min(n-1, n*99/100)].Microseconds()) / 1000
	}
	out.RPS = float64(len(rec.latencies)) / elapsed.Seconds()
	if n := len(rec.latencies); n > 0 {
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		out.P50 = ms(rec.latencies[n*50/100])
		out.P99 = ms(rec.latencies[min(n-1, n*99/100)])
		out.Max = ms(rec.latencies[n-1])
		for _, l := range rec.latencies {
			if l > time.Second {
				out.OverOne++
			}
		}
	}
	must(json.NewEncoder(os.Stdout).Encode(out))
}

// slowClient opens a TLS connection and sends a request's headers one byte every 200 ms, never
// finishing. It returns true when the server closed the connection (its header deadline).
func slowClient(url string, config *tls.Config, stop chan struct{}) bool {
	hostPort := strings.SplitN(strings.TrimPrefix(url, "https://"), "/", 2)[0]
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", hostPort, config)
	if err != nil {
		time.Sleep(100 * time.Millisecond)
		return false
	}
	defer conn.Close()
	request := "POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n" + strings.Repeat("x", 10000)
	for i := 0; i < len(request); i++ {
		select {
		case <-stop:
			return false
		case <-time.After(200 * time.Millisecond):
		}
		if _, err := conn.Write([]byte{request[i]}); err != nil {
			return true
		}
	}
	return false
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}
