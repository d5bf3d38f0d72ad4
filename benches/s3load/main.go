// s3load: an S3 load generator shaped like MinIO's warp for the cases Ferrobay's
// object benchmark compares (warp itself is not available from the Go module proxy
// here): PUT and GET of fixed-size objects and LIST, with N concurrent workers for a
// fixed duration, latency percentiles, and one JSON report on stdout.
//
//	s3load -endpoint 127.0.0.1:9000 -access-key K -secret-key S -bucket b \
//	    -op put|get|list -size 1048576 -concurrency 16 -duration 10s
//
// What each operation does (as warp's put / get / list benchmarks):
//   - put: every worker uploads new objects (random data, a fresh key each time) until
//     the duration is over. Objects are removed afterwards unless -keep.
//   - get: -objects objects are uploaded first (not measured), then every worker
//     downloads random ones, reading each body to its end; a body of the wrong length
//     is an error. Optionally (-verify) every body is compared with what was uploaded.
//   - list: -objects objects of -size bytes are uploaded first under one prefix per
//     worker, then every worker lists its own prefix (ListObjectsV2, 1,000 keys a page)
//     from start to end, again and again; one operation is one page.
//
// Uploads use minio-go's defaults (as warp does): over plain HTTP a signed streaming
// payload (aws-chunked, SHA-256 per chunk).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

type config struct {
	endpoint    string
	accessKey   string
	secretKey   string
	region      string
	bucket      string
	op          string
	size        int64
	concurrency int
	duration    time.Duration
	objects     int
	prefix      string
	keep        bool
	verify      bool
}

// Percentiles of one latency series, in milliseconds.
type Latency struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

// Report is the JSON written on stdout.
type Report struct {
	Op          string   `json:"op"`
	Endpoint    string   `json:"endpoint"`
	ObjectBytes int64    `json:"object_bytes"`
	Concurrency int      `json:"concurrency"`
	DurationS   float64  `json:"duration_s"`
	Ops         int64    `json:"ops"`
	Errors      int64    `json:"errors"`
	FirstError  string   `json:"first_error,omitempty"`
	Bytes       int64    `json:"bytes"`
	Keys        int64    `json:"keys,omitempty"`
	OpsPerS     float64  `json:"ops_per_s"`
	MiBPerS     float64  `json:"mib_per_s"`
	KeysPerS    float64  `json:"keys_per_s,omitempty"`
	LatencyMs   Latency  `json:"latency_ms"`
	FirstByteMs *Latency `json:"first_byte_ms,omitempty"`
	// Objects uploaded before the measured phase (get, list).
	Prepared int `json:"prepared_objects,omitempty"`
}

// One worker's results, merged at the end (no locks on the hot path).
type tally struct {
	ops, errors, bytes, keys int64
	latency, firstByte       []time.Duration
	firstError               error
}

func (t *tally) fail(err error) {
	t.errors++
	if t.firstError == nil {
		t.firstError = err
	}
}

func percentiles(d []time.Duration) Latency {
	if len(d) == 0 {
		return Latency{}
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	ms := func(x time.Duration) float64 { return float64(x.Microseconds()) / 1000 }
	at := func(p float64) float64 {
		i := int(p * float64(len(d)-1))
		return ms(d[i])
	}
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return Latency{
		P50: at(0.50), P90: at(0.90), P99: at(0.99),
		Max:  ms(d[len(d)-1]),
		Mean: ms(sum / time.Duration(len(d))),
	}
}

// payload returns size bytes of random data whose first 8 bytes are n, so that every
// object differs without a new buffer per object.
func payload(buf []byte, n uint64) []byte {
	for i := 0; i < 8 && i < len(buf); i++ {
		buf[i] = byte(n >> (8 * i))
	}
	return buf
}

func randomBuffer(size int64, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	buf := make([]byte, size)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	return buf
}

func put(ctx context.Context, c *minio.Client, cfg *config, key string, body []byte) error {
	info, err := c.PutObject(ctx, cfg.bucket, key, bytes.NewReader(body), int64(len(body)),
		minio.PutObjectOptions{ContentType: "application/octet-stream"})
	if err != nil {
		return err
	}
	if info.Size != int64(len(body)) {
		return fmt.Errorf("put %s: %d bytes stored, %d sent", key, info.Size, len(body))
	}
	return nil
}

// prepare uploads cfg.objects objects (keys returned) with cfg.concurrency workers.
func prepare(ctx context.Context, c *minio.Client, cfg *config, keyOf func(i int) string) ([]string, error) {
	keys := make([]string, cfg.objects)
	var next atomic.Int64
	var firstErr error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := 0; w < cfg.concurrency; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			buf := randomBuffer(cfg.size, uint64(w)+1000)
			for {
				i := int(next.Add(1) - 1)
				if i >= cfg.objects {
					return
				}
				keys[i] = keyOf(i)
				if err := put(ctx, c, cfg, keys[i], payload(buf, uint64(i))); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
			}
		}(w)
	}
	wg.Wait()
	return keys, firstErr
}

func removeAll(c *minio.Client, cfg *config, prefix string) error {
	ctx := context.Background()
	objects := c.ListObjects(ctx, cfg.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true})
	for e := range c.RemoveObjects(ctx, cfg.bucket, objects, minio.RemoveObjectsOptions{}) {
		if e.Err != nil {
			return e.Err
		}
	}
	return nil
}

// run starts cfg.concurrency workers calling one(worker, tally) until the deadline.
// The measured phase is bracketed by "s3load: measure start" / "s3load: measure end"
// lines on stderr, so that a caller can sample the servers' CPU time around exactly it.
func run(cfg *config, one func(w int, i uint64, t *tally)) ([]*tally, time.Duration) {
	tallies := make([]*tally, cfg.concurrency)
	var wg sync.WaitGroup
	fmt.Fprintln(os.Stderr, "s3load: measure start")
	start := time.Now()
	deadline := start.Add(cfg.duration)
	for w := 0; w < cfg.concurrency; w++ {
		tallies[w] = &tally{}
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := uint64(0); time.Now().Before(deadline); i++ {
				one(w, i, tallies[w])
			}
		}(w)
	}
	wg.Wait()
	took := time.Since(start)
	fmt.Fprintln(os.Stderr, "s3load: measure end")
	return tallies, took
}

func benchPut(c *minio.Client, cfg *config, r *Report) ([]*tally, time.Duration) {
	bufs := make([][]byte, cfg.concurrency)
	for w := range bufs {
		bufs[w] = randomBuffer(cfg.size, uint64(w)+1)
	}
	return run(cfg, func(w int, i uint64, t *tally) {
		key := fmt.Sprintf("%s/put/w%d/%d", cfg.prefix, w, i)
		began := time.Now()
		if err := put(context.Background(), c, cfg, key, payload(bufs[w], uint64(w)<<40|i)); err != nil {
			t.fail(err)
			return
		}
		t.latency = append(t.latency, time.Since(began))
		t.ops++
		t.bytes += cfg.size
	})
}

func benchGet(c *minio.Client, cfg *config, r *Report) ([]*tally, time.Duration, error) {
	keys, err := prepare(context.Background(), c, cfg, func(i int) string {
		return fmt.Sprintf("%s/get/%d", cfg.prefix, i)
	})
	if err != nil {
		return nil, 0, fmt.Errorf("preparing objects: %w", err)
	}
	r.Prepared = len(keys)
	var want [][]byte
	if cfg.verify {
		want = make([][]byte, cfg.concurrency)
		for w := range want {
			want[w] = randomBuffer(cfg.size, uint64(w)+1000)
		}
	}
	bufs := make([][]byte, cfg.concurrency)
	for w := range bufs {
		bufs[w] = make([]byte, cfg.size+1)
	}
	tallies, took := run(cfg, func(w int, i uint64, t *tally) {
		n := rand.IntN(len(keys))
		began := time.Now()
		obj, err := c.GetObject(context.Background(), cfg.bucket, keys[n], minio.GetObjectOptions{})
		if err != nil {
			t.fail(err)
			return
		}
		defer obj.Close()
		buf := bufs[w]
		got, err := io.ReadFull(obj, buf[:1])
		if err != nil {
			t.fail(fmt.Errorf("get %s: %w", keys[n], err))
			return
		}
		t.firstByte = append(t.firstByte, time.Since(began))
		m, err := io.ReadFull(obj, buf[1:])
		got += m
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
			t.fail(fmt.Errorf("get %s: %w", keys[n], err))
			return
		}
		if int64(got) != cfg.size {
			t.fail(fmt.Errorf("get %s: %d bytes, want %d", keys[n], got, cfg.size))
			return
		}
		t.latency = append(t.latency, time.Since(began))
		if want != nil {
			// Which worker's buffer it came from is unknown: compare all but the stamp.
			if !bytes.Equal(buf[8:got], want[0][8:]) && !matchesAny(buf[8:got], want) {
				t.fail(fmt.Errorf("get %s: bytes differ from what was uploaded", keys[n]))
				return
			}
		}
		t.ops++
		t.bytes += int64(got)
	})
	return tallies, took, nil
}

func matchesAny(got []byte, want [][]byte) bool {
	for _, w := range want {
		if bytes.Equal(got, w[8:]) {
			return true
		}
	}
	return false
}

func benchList(c *minio.Client, cfg *config, r *Report) ([]*tally, time.Duration, error) {
	perWorker := (cfg.objects + cfg.concurrency - 1) / cfg.concurrency
	keys, err := prepare(context.Background(), c, cfg, func(i int) string {
		return fmt.Sprintf("%s/list/w%d/%08d", cfg.prefix, i/perWorker, i)
	})
	if err != nil {
		return nil, 0, fmt.Errorf("preparing objects: %w", err)
	}
	r.Prepared = len(keys)
	core := &minio.Core{Client: c}
	tallies, took := run(cfg, func(w int, i uint64, t *tally) {
		prefix := fmt.Sprintf("%s/list/w%d/", cfg.prefix, w)
		token := ""
		for {
			began := time.Now()
			res, err := core.ListObjectsV2(cfg.bucket, prefix, "", token, "", 1000)
			if err != nil {
				t.fail(err)
				return
			}
			t.latency = append(t.latency, time.Since(began))
			t.ops++
			t.keys += int64(len(res.Contents))
			if !res.IsTruncated || res.NextContinuationToken == "" {
				return
			}
			token = res.NextContinuationToken
		}
	})
	return tallies, took, nil
}

func main() {
	var cfg config
	var size string
	flag.StringVar(&cfg.endpoint, "endpoint", "127.0.0.1:9000", "S3 endpoint HOST:PORT (plain HTTP)")
	flag.StringVar(&cfg.accessKey, "access-key", os.Getenv("AWS_ACCESS_KEY_ID"), "access key")
	flag.StringVar(&cfg.secretKey, "secret-key", os.Getenv("AWS_SECRET_ACCESS_KEY"), "secret key")
	flag.StringVar(&cfg.region, "region", "us-east-1", "region")
	flag.StringVar(&cfg.bucket, "bucket", "s3load", "bucket (created if missing)")
	flag.StringVar(&cfg.op, "op", "put", "put, get or list")
	flag.StringVar(&size, "size", "1MiB", "object size: bytes, or with KiB / MiB")
	flag.IntVar(&cfg.concurrency, "concurrency", 16, "concurrent workers")
	flag.DurationVar(&cfg.duration, "duration", 10*time.Second, "measured time")
	flag.IntVar(&cfg.objects, "objects", 0, "objects uploaded before get / list (default get 200, list 10000)")
	flag.StringVar(&cfg.prefix, "prefix", fmt.Sprintf("s3load-%d", time.Now().UnixNano()), "key prefix of this run")
	flag.BoolVar(&cfg.keep, "keep", false, "keep the objects afterwards")
	flag.BoolVar(&cfg.verify, "verify", false, "get: compare every body with what was uploaded")
	flag.Parse()
	var err error
	if cfg.size, err = parseSize(size); err != nil || cfg.size <= 0 {
		fatal(fmt.Errorf("-size %q: expected bytes, e.g. 4KiB or 1MiB", size))
	}
	if cfg.concurrency < 1 {
		fatal(errors.New("-concurrency must be at least 1"))
	}
	if cfg.objects == 0 {
		cfg.objects = map[string]int{"get": 200, "list": 10000}[cfg.op]
	}

	transport, err := minio.DefaultTransport(false)
	if err != nil {
		fatal(err)
	}
	// As many idle connections as workers: every worker keeps its own.
	transport.MaxIdleConns = 2 * cfg.concurrency
	transport.MaxIdleConnsPerHost = 2 * cfg.concurrency
	c, err := minio.New(cfg.endpoint, &minio.Options{
		Creds:     credentials.NewStaticV4(cfg.accessKey, cfg.secretKey, ""),
		Secure:    false,
		Region:    cfg.region,
		Transport: transport,
	})
	if err != nil {
		fatal(err)
	}
	ctx := context.Background()
	if ok, err := c.BucketExists(ctx, cfg.bucket); err != nil {
		fatal(fmt.Errorf("bucket %s: %w", cfg.bucket, err))
	} else if !ok {
		if err := c.MakeBucket(ctx, cfg.bucket, minio.MakeBucketOptions{Region: cfg.region}); err != nil {
			fatal(fmt.Errorf("make bucket %s: %w", cfg.bucket, err))
		}
	}

	r := Report{Op: cfg.op, Endpoint: cfg.endpoint, ObjectBytes: cfg.size, Concurrency: cfg.concurrency}
	var tallies []*tally
	var took time.Duration
	switch cfg.op {
	case "put":
		tallies, took = benchPut(c, &cfg, &r)
	case "get":
		tallies, took, err = benchGet(c, &cfg, &r)
	case "list":
		tallies, took, err = benchList(c, &cfg, &r)
	default:
		err = fmt.Errorf("-op %q: expected put, get or list", cfg.op)
	}
	if err != nil {
		fatal(err)
	}
	var lat, fb []time.Duration
	for _, t := range tallies {
		r.Ops += t.ops
		r.Errors += t.errors
		r.Bytes += t.bytes
		r.Keys += t.keys
		lat = append(lat, t.latency...)
		fb = append(fb, t.firstByte...)
		if t.firstError != nil && r.FirstError == "" {
			r.FirstError = t.firstError.Error()
		}
	}
	r.DurationS = took.Seconds()
	r.OpsPerS = float64(r.Ops) / r.DurationS
	r.MiBPerS = float64(r.Bytes) / float64(1<<20) / r.DurationS
	r.KeysPerS = float64(r.Keys) / r.DurationS
	r.LatencyMs = percentiles(lat)
	if len(fb) > 0 {
		l := percentiles(fb)
		r.FirstByteMs = &l
	}
	if !cfg.keep {
		if err := removeAll(c, &cfg, cfg.prefix+"/"); err != nil {
			fmt.Fprintf(os.Stderr, "s3load: removing the objects: %v\n", err)
		}
	}
	out, _ := json.MarshalIndent(r, "", "  ")
	fmt.Println(string(out))
	if r.Ops == 0 {
		os.Exit(1)
	}
}

func parseSize(s string) (int64, error) {
	var n int64
	var unit string
	if _, err := fmt.Sscanf(s, "%d%s", &n, &unit); err != nil {
		if _, err := fmt.Sscanf(s, "%d", &n); err != nil {
			return 0, err
		}
		return n, nil
	}
	mult := map[string]int64{"": 1, "B": 1, "KiB": 1 << 10, "K": 1 << 10, "MiB": 1 << 20, "M": 1 << 20}[unit]
	if mult == 0 {
		return 0, fmt.Errorf("unit %q", unit)
	}
	return n * mult, nil
}

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "s3load: %v\n", err)
	os.Exit(2)
}
