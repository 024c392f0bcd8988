// Package healthcheck is the containers' HEALTHCHECK: the runtime images
// have no curl, so each binary asks its own server over loopback.
package healthcheck

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Probe asks http://127.0.0.1:<port of listenAddr><path>, within three
// seconds, and fails unless the answer is 200. listenAddr is what the
// server listens on, such as ":8080".
func Probe(ctx context.Context, listenAddr, path string) error {
	_, port, err := net.SplitHostPort(listenAddr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort("127.0.0.1", port)+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s", path, resp.Status)
	}
	return nil
}
