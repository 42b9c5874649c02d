// Command bare is the baseline of scripts/bench-ingest: a net/http server
// that reads each POST body and answers 202 with a small JSON body,
// storing nothing, so the benchmark can show what durability costs.
package main

import (
	"flag"
	"io"
	"log"
	"net/http"
	"time"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:18081", "address")
	flag.Parse()
	srv := &http.Server{
		Addr:              *addr,
		ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, err := io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20)); err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusAccepted)
			io.WriteString(w, `{"queue_id":"01a228c5-7fec-77fd-86ed-ecc4d5b0e9ec","status":"enqueued"}`+"\n")
		}),
	}
	log.Fatal(srv.ListenAndServe())
}
