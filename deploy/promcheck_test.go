package deploy_test

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// checkPrometheusConfig is `promtool check config` done in-process, with
// the Prometheus packages at the version go.mod requires (the version the
// dashboard's queries are parsed with): the configuration is loaded and
// validated as Prometheus loads it, every rule file it names must exist,
// the scrape configs must resolve, and each rule file must pass
// checkRuleFile. The promtool binary, built from the Prometheus module
// when none is installed, would take a build that compiles every service
// discovery, the Kubernetes client and three clouds' SDKs, more than 20
// minutes on 2 cores (docs/decisions/0026-fresh-machine-check-in-ci.md);
// these packages add a fraction of that to this test's build, and need no
// binary, so an installed promtool of another version cannot judge instead.
//
// Only the service discoveries the config package itself registers are
// known here (static_configs): a config that adds another, say
// kubernetes_sd_configs, fails this check until its package is imported,
// rather than passing unchecked. promtool's TLS and credentials file checks
// are left out because the config names no such file; its lints are off by
// default (they warn, not fail) and are left out too.
func checkPrometheusConfig(file string) []error {
	cfg, err := config.LoadFile(file, false, discardLogger)
	if err != nil {
		return []error{err}
	}
	var errs []error
	if _, err := cfg.GetScrapeConfigs(); err != nil {
		errs = append(errs, fmt.Errorf("%s: loading scrape configs: %w", file, err))
	}
	// LoadFile made the rule files' paths relative to the config's folder.
	for _, pattern := range cfg.RuleFiles {
		files, err := filepath.Glob(pattern)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: rule_files %q: %w", file, pattern, err))
			continue
		}
		if len(files) == 0 && !strings.Contains(pattern, "*") {
			errs = append(errs, fmt.Errorf("%s: rule_files %q does not point to an existing file", file, pattern))
		}
		for _, f := range files {
			errs = append(errs, checkRuleFile(f)...)
		}
	}
	return errs
}

// checkRuleFile is `promtool check rules` in-process: the file is parsed
// strictly (an unknown field is an error), and each rule validated as
// Prometheus validates it on load: its PromQL expression, its name, its
// labels, its `for`, and its annotations' templates.
func checkRuleFile(file string) []error {
	_, errs := rulefmt.ParseFile(file, false, model.UTF8Validation, parser.NewParser(parser.Options{}), discardLogger)
	return errs
}

var discardLogger = slog.New(slog.DiscardHandler)
