// Package natstest runs an embedded NATS server with JetStream, in the
// test binary, on a loopback port and a temporary store directory, for the
// nats binding's tests. Stop and Start keep the port and the store, so a
// test can take the broker down and bring it back with its streams.
package natstest

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Server is one embedded NATS server.
type Server struct {
	// ClientOptions are added to the test's own connections (Conn): the
	// TLS or login a server started with StartWith asks for.
	ClientOptions []nats.Option

	tb   testing.TB
	opts server.Options
	srv  *server.Server
}

// Start runs a JetStream server on a free loopback port with its store in
// a temporary directory; it is shut down at the test's end.
func Start(tb testing.TB) *Server {
	tb.Helper()
	return StartWith(tb, nil)
}

// StartWith is Start with the server's options changed by opt first (users,
// TLS).
func StartWith(tb testing.TB, opt func(*server.Options)) *Server {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &Server{tb: tb, opts: server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: tb.TempDir(),
		NoLog: true, NoSigs: true, MaxPayload: 1 << 20}}
	if opt != nil {
		opt(&s.opts)
	}
	s.Restart()
	tb.Cleanup(s.Stop)
	return s
}

// URL is nats://127.0.0.1:PORT.
func (s *Server) URL() string { return "nats://127.0.0.1:" + strconv.Itoa(s.opts.Port) }

// Stop shuts the server down (idempotent).
func (s *Server) Stop() {
	if s.srv != nil {
		s.srv.Shutdown()
		s.srv.WaitForShutdown()
		s.srv = nil
	}
}

// Restart starts the server again on the same port and store.
func (s *Server) Restart() {
	s.tb.Helper()
	o := s.opts
	srv, err := server.NewServer(&o)
	if err != nil {
		s.tb.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		s.tb.Fatal("nats server not ready")
	}
	s.srv = srv
}

// Conn is a client connection for the test itself.
func (s *Server) Conn() (*nats.Conn, jetstream.JetStream) {
	s.tb.Helper()
	opts := append([]nats.Option(nil), s.ClientOptions...)
	if s.opts.Username != "" {
		opts = append(opts, nats.UserInfo(s.opts.Username, s.opts.Password))
	}
	nc, err := nats.Connect(s.URL(), opts...)
	if err != nil {
		s.tb.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		s.tb.Fatal(err)
	}
	return nc, js
}

// Stream creates a file stream name on subjects with the given
// duplicate_window.
func (s *Server) Stream(name string, window time.Duration, subjects ...string) {
	s.tb.Helper()
	nc, js := s.Conn()
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: subjects, Duplicates: window,
		Storage: jetstream.FileStorage}); err != nil {
		s.tb.Fatal(err)
	}
}

// Message is one stored message.
type Message struct {
	Subject string
	Data    string
	Header  nats.Header
	Seq     uint64
}

// Messages reads every message of stream, in order.
func (s *Server) Messages(stream string) []Message {
	s.tb.Helper()
	nc, js := s.Conn()
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		s.tb.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		s.tb.Fatal(err)
	}
	var out []Message
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			continue // deleted
		}
		out = append(out, Message{Subject: m.Subject, Data: string(m.Data), Header: m.Header, Seq: m.Sequence})
	}
	return out
}
