// Command standin plays the two upstream images of the compose stack that
// `make compose-check` cannot build from Debian's packages: Jaeger and
// Grafana (docs/compose-check.md). Each is a wiring check, not the product:
//
// Which one is the argument, or the variable STANDIN.
//
//	standin jaeger   OTLP/HTTP on :4318 (POST /v1/traces, protobuf, as the
//	                 service sends it) and Jaeger's query API on :16686, of
//	                 which only GET /api/services: the service names of the
//	                 spans received. Reproduces: the ports, the OTLP/HTTP
//	                 receiver's path and encoding. Not: storage, search, UI,
//	                 OTLP/gRPC on 4317, JSON-encoded OTLP.
//	standin grafana  reads the provisioning that compose mounts
//	                 (/etc/grafana/provisioning, /var/lib/grafana/dashboards)
//	                 and exits non-zero if a data source or dashboard is
//	                 missing or does not parse; then serves :3000 with
//	                 GET /api/health and GET /api/dashboards/uid/{uid}.
//	                 Reproduces: the mount points, the provisioning files'
//	                 shape, the dashboard uid. Not: rendering, queries, login.
//
// Both listen on 127.0.0.1 only: compose runs them with host networking, and
// compose's own ports are published on 127.0.0.1 only.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"go.yaml.in/yaml/v4"
	"google.golang.org/protobuf/proto"
)

func main() {
	// The stand-in to play: the argument, or STANDIN (the image's setting,
	// as an image with no shell cannot put a variable in its command).
	which := os.Getenv("STANDIN")
	if len(os.Args) == 2 {
		which = os.Args[1]
	}
	var err error
	switch which {
	case "jaeger":
		err = jaeger()
	case "grafana":
		err = grafana("/etc/grafana/provisioning")
	default:
		err = fmt.Errorf("unknown stand-in %q: want jaeger or grafana", which)
	}
	log.Fatal(err)
}

// serve runs handler on 127.0.0.1:port.
func serve(port string, handler http.Handler) error {
	srv := &http.Server{Addr: "127.0.0.1:" + port, Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	return srv.ListenAndServe()
}

// writeJSON answers v as JSON with status 200.
func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// services is the set of service names the OTLP receiver has seen spans of.
type services struct {
	mu    sync.Mutex
	names map[string]int
}

// record adds the spans of one OTLP export request, by service.name.
func (s *services) record(req *coltracepb.ExportTraceServiceRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		name := "unknown_service"
		for _, attr := range rs.GetResource().GetAttributes() {
			if attr.GetKey() == "service.name" {
				name = attr.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			s.names[name] += len(ss.GetSpans())
		}
	}
}

// list is Jaeger's GET /api/services answer.
func (s *services) list() map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.names))
	for name := range s.names {
		names = append(names, name)
	}
	sort.Strings(names)
	return map[string]any{"data": names, "total": len(names)}
}

func jaeger() error {
	seen := &services{names: map[string]int{}}
	otlp := http.NewServeMux()
	otlp.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
		var req coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &req)
		}
		if err != nil {
			http.Error(w, "not an OTLP protobuf export request: "+err.Error(), http.StatusBadRequest)
			return
		}
		seen.record(&req)
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		_, _ = w.Write(out)
	})
	query := http.NewServeMux()
	query.HandleFunc("GET /api/services", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, seen.list())
	})
	errs := make(chan error, 2)
	go func() { errs <- serve("4318", otlp) }()
	go func() { errs <- serve("16686", query) }()
	return <-errs
}

// provisioning is what grafana found under its provisioning folder.
type provisioning struct {
	dataSources []string
	dashboards  map[string]string // uid -> file
}

func grafana(dir string) error {
	p, err := loadProvisioning(dir)
	if err != nil {
		return fmt.Errorf("grafana provisioning in %s: %w", dir, err)
	}
	log.Printf("provisioned data sources %v and %d dashboard(s)", p.dataSources, len(p.dashboards))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/health", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]string{"database": "ok"})
	})
	mux.HandleFunc("GET /api/dashboards/uid/{uid}", func(w http.ResponseWriter, r *http.Request) {
		file, ok := p.dashboards[r.PathValue("uid")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		writeJSON(w, map[string]any{"meta": map[string]string{"provisionedExternalId": filepath.Base(file)}})
	})
	return serve("3000", mux)
}

// loadProvisioning reads the data source and dashboard provider files the
// way Grafana's file provisioning lays them out, and every dashboard in the
// folders the providers name.
func loadProvisioning(dir string) (provisioning, error) {
	p := provisioning{dashboards: map[string]string{}}
	var sources struct {
		DataSources []struct{ Name, Type, URL string } `yaml:"datasources"`
	}
	if err := eachYAML(filepath.Join(dir, "datasources"), &sources, func() error {
		for _, ds := range sources.DataSources {
			if ds.Name == "" || ds.Type == "" || ds.URL == "" {
				return fmt.Errorf("data source %+v lacks a name, type or url", ds)
			}
			p.dataSources = append(p.dataSources, ds.Name)
		}
		return nil
	}); err != nil {
		return p, err
	}
	var providers struct {
		Providers []struct {
			Name    string
			Options struct{ Path string }
		}
	}
	if err := eachYAML(filepath.Join(dir, "dashboards"), &providers, func() error {
		for _, prov := range providers.Providers {
			files, _ := filepath.Glob(filepath.Join(prov.Options.Path, "*.json"))
			if len(files) == 0 {
				return fmt.Errorf("dashboard provider %q: no dashboard in %q (is the folder mounted?)", prov.Name, prov.Options.Path)
			}
			for _, file := range files {
				uid, err := dashboardUID(file)
				if err != nil {
					return err
				}
				p.dashboards[uid] = file
			}
		}
		return nil
	}); err != nil {
		return p, err
	}
	if len(p.dataSources) == 0 || len(p.dashboards) == 0 {
		return p, errors.New("no data source or no dashboard provisioned (are the folders mounted?)")
	}
	return p, nil
}

// eachYAML decodes every *.yml and *.yaml file in dir into v and calls use
// after each.
func eachYAML(dir string, v any, use func() error) error {
	files, _ := filepath.Glob(filepath.Join(dir, "*.y*ml"))
	for _, file := range files {
		data, err := os.ReadFile(file) //nolint:gosec // G304: the repository's own deploy files
		if err == nil {
			err = yaml.Unmarshal(data, v)
		}
		if err == nil {
			err = use()
		}
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
	}
	return nil
}

// dashboardUID is the uid of the dashboard JSON in file.
func dashboardUID(file string) (string, error) {
	data, err := os.ReadFile(file) //nolint:gosec // G304: the repository's own dashboard files
	if err != nil {
		return "", err
	}
	var d struct {
		UID    string `json:"uid"`
		Panels []json.RawMessage
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return "", fmt.Errorf("%s: %w", file, err)
	}
	if d.UID == "" || len(d.Panels) == 0 {
		return "", fmt.Errorf("%s: a dashboard needs a uid and panels", file)
	}
	return d.UID, nil
}
