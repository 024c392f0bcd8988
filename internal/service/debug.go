package service

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"golang.org/x/sync/errgroup"
)

// debugServer serves net/http/pprof on DEBUG_ADDR, a listener of its own:
// profiles are never reachable through the API's port, and the handlers
// are off unless an operator asks for them.
type debugServer struct {
	ln  net.Listener
	srv *http.Server
}

func newDebugServer(addr string) (*debugServer, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on DEBUG_ADDR %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return &debugServer{ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}, nil
}

func (d *debugServer) run(g *errgroup.Group, logger *slog.Logger) {
	if d == nil {
		return
	}
	g.Go(func() error {
		logger.Info("serving pprof", "addr", d.ln.Addr().String())
		if err := d.srv.Serve(d.ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("debug server: %w", err)
		}
		return nil
	})
}

// close stops it at once: a profile being taken is cut short.
func (d *debugServer) close() {
	if d != nil {
		_ = d.srv.Close()
	}
}
