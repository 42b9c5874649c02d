// Command otlpsink is the trace receiver of scripts/bench-ingest's
// tracing-on run: it accepts OTLP/HTTP exports on POST /v1/traces, reads
// and discards them, and answers success, so the benchmark measures what
// exporting costs the daemon and not a collector. GET /stats reports the
// exports and bytes received, to show spans did flow.
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"sync/atomic"
	"time"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:4318", "address")
	flag.Parse()
	var exports, bytes atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		exports.Add(1)
		bytes.Add(n)
		// An empty ExportTraceServiceResponse is zero bytes of protobuf.
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	})
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "exports=%d bytes=%d\n", exports.Load(), bytes.Load())
	})
	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
