package deploy_test

import (
	"flag"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var updateImageModules = flag.Bool("update-image-modules", false, "rewrite deploy/image-modules.txt from the modules the Dockerfile's binaries link")

// instruction is one instruction of a Dockerfile: its keyword, upper-cased,
// and the rest, with continued lines joined.
type instruction struct {
	keyword, args string
}

// readDockerfile returns the repository's Dockerfile's instructions, in order.
func readDockerfile(t *testing.T) []instruction {
	t.Helper()
	raw, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var out []instruction
	var line strings.Builder
	for _, l := range strings.Split(string(raw), "\n") {
		trimmed := strings.TrimSpace(l)
		if line.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cont, ok := strings.CutSuffix(trimmed, `\`); ok {
			line.WriteString(cont + " ")
			continue
		}
		line.WriteString(trimmed)
		keyword, args, _ := strings.Cut(line.String(), " ")
		out = append(out, instruction{strings.ToUpper(keyword), strings.TrimSpace(args)})
		line.Reset()
	}
	return out
}

// stage is one stage of a Dockerfile: its base (FROM's image), its name (AS),
// and its instructions after FROM.
type stage struct {
	base, name   string
	instructions []instruction
}

// dockerfileStages splits instructions into stages; what comes before the
// first FROM (global ARGs) belongs to none.
func dockerfileStages(instructions []instruction) []stage {
	var stages []stage
	for _, in := range instructions {
		if in.keyword == "FROM" {
			f := strings.Fields(in.args)
			s := stage{base: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			}
			stages = append(stages, s)
			continue
		}
		if len(stages) > 0 {
			stages[len(stages)-1].instructions = append(stages[len(stages)-1].instructions, in)
		}
	}
	return stages
}

// A platform's cluster runs images with runAsNonRoot, and Kubernetes can
// only tell a numeric user from root: an image whose USER is a name
// ("nonroot") is refused at start (CreateContainerConfigError). Every USER
// is a numeric uid:gid other than root's, and every stage that is an image
// of its own (it has an ENTRYPOINT) sets one.
func TestDockerfileUsersAreNumericAndNotRoot(t *testing.T) {
	t.Parallel()
	numeric := regexp.MustCompile(`^([0-9]+):([0-9]+)$`)
	stages := dockerfileStages(readDockerfile(t))
	for _, s := range stages {
		user, entrypoint := "", false
		for _, in := range s.instructions {
			switch in.keyword {
			case "ENTRYPOINT":
				entrypoint = true
			case "USER":
				user = in.args
				m := numeric.FindStringSubmatch(user)
				switch {
				case m == nil:
					t.Errorf("stage %s: USER %s is not a numeric uid:gid, so runAsNonRoot refuses the image", s.name, user)
				case m[1] == "0" || m[2] == "0":
					t.Errorf("stage %s: USER %s is root's", s.name, user)
				}
			}
		}
		if entrypoint && user == "" {
			t.Errorf("stage %s: an image with no USER runs as its base image's user; give it a numeric uid:gid", s.name)
		}
	}
	if len(stages) == 0 {
		t.Fatal("the Dockerfile has no FROM")
	}
}

// A tag is moved upstream whenever its image is rebuilt, so a base named by
// tag alone makes no two builds alike, and supply-chain checks refuse it.
// Every external base is pinned by digest, name:tag@sha256:<64 hex>, the tag
// kept for the reader; a base given as a build argument is pinned in the
// argument's default.
func TestDockerfileBasesArePinnedByDigest(t *testing.T) {
	t.Parallel()
	pinned := regexp.MustCompile(`^[^\s@]+:[A-Za-z0-9._-]+@sha256:[0-9a-f]{64}$`)
	argument := regexp.MustCompile(`^\$\{?(\w+)\}?$`)
	instructions := readDockerfile(t)
	global := map[string]string{}
	for _, in := range instructions {
		if in.keyword == "FROM" {
			break
		}
		if in.keyword == "ARG" {
			name, value, _ := strings.Cut(in.args, "=")
			global[name] = value
		}
	}
	named := map[string]bool{"scratch": true}
	for _, s := range dockerfileStages(instructions) {
		base := s.base
		if m := argument.FindStringSubmatch(base); m != nil {
			value, ok := global[m[1]]
			if !ok || value == "" {
				t.Errorf("stage %s: FROM %s names no ARG with a default before the first FROM", s.name, base)
				continue
			}
			base = value
		}
		if !named[base] && !pinned.MatchString(base) {
			t.Errorf("stage %s: base %s is not pinned by digest (name:tag@sha256:<digest>)", s.name, base)
		}
		named[s.name] = true
	}
}

// imageModules lists the modules the Dockerfile's cached layer downloads.
const imageModules = "deploy/image-modules.txt"

// The Dockerfile's module layer downloads the modules its binaries link and
// no others: a bare `go mod download` fetches every module go.mod names,
// the tests' included (Prometheus's server, for deploy/'s checks, brings
// cloud and Kubernetes clients). The layer downloads the modules in
// deploy/image-modules.txt, at go.mod's versions, and the file holds what
// `go list -deps` finds for the binaries the Dockerfile builds, for linux
// on both architectures an image is built for. After adding or dropping a
// dependency of a binary, regenerate the file with
//
//	go test ./deploy -run TestImageDownloadsWhatItsBinariesLink -update-image-modules
func TestImageDownloadsWhatItsBinariesLink(t *testing.T) {
	t.Parallel()
	download := regexp.MustCompile(`\bgo mod download\b([^&;|]*)`)
	build := regexp.MustCompile(`\bgo build\b[^&;|]*\s(\./cmd/[\w-]+)`)
	list := "$(cat " + imageModules[strings.LastIndex(imageModules, "/")+1:] + ")"
	var binaries []string
	for _, s := range dockerfileStages(readDockerfile(t)) {
		copied := false
		for _, in := range s.instructions {
			if in.keyword == "COPY" && slices.Contains(strings.Fields(in.args), imageModules) {
				copied = true
			}
			if in.keyword != "RUN" {
				continue
			}
			for _, m := range download.FindAllStringSubmatch(in.args, -1) {
				switch args := strings.TrimSpace(m[1]); {
				case args == "":
					t.Errorf("stage %s: RUN %s downloads every module go.mod names, the tests' too; download %s", s.name, in.args, list)
				case args != list:
					t.Errorf("stage %s: RUN %s downloads %s, not %s", s.name, in.args, args, list)
				case !copied:
					t.Errorf("stage %s: RUN %s comes before a COPY of %s", s.name, in.args, imageModules)
				}
			}
			for _, m := range build.FindAllStringSubmatch(in.args, -1) {
				binaries = append(binaries, m[1])
			}
		}
	}
	if len(binaries) == 0 {
		t.Fatal("the Dockerfile builds no ./cmd/... package")
	}

	// What the binaries link, for each architecture an image is built for.
	var linked []string
	for _, arch := range []string{"amd64", "arm64"} {
		cmd := exec.Command("go", append([]string{"list", "-deps", "-f", "{{with .Module}}{{if not .Main}}{{.Path}}{{end}}{{end}}"}, binaries...)...)
		cmd.Dir = ".."
		cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+arch, "CGO_ENABLED=0")
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps %v (%s): %v", binaries, arch, err)
		}
		linked = append(linked, strings.Fields(string(out))...)
	}
	slices.Sort(linked)
	linked = slices.Compact(linked)

	want := strings.Join(linked, "\n") + "\n"
	if *updateImageModules {
		if err := os.WriteFile("../"+imageModules, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	raw, err := os.ReadFile("../" + imageModules)
	if err != nil {
		t.Fatal(err)
	}
	listed := strings.Fields(string(raw))
	var missing, extra []string
	for _, m := range linked {
		if !slices.Contains(listed, m) {
			missing = append(missing, m)
		}
	}
	for _, m := range listed {
		if !slices.Contains(linked, m) {
			extra = append(extra, m)
		}
	}
	if len(missing) > 0 || len(extra) > 0 || string(raw) != want {
		t.Errorf("%s is not the modules %v link (missing %v, not linked %v, or not sorted one a line); regenerate it:\n\tgo test ./deploy -run TestImageDownloadsWhatItsBinariesLink -update-image-modules",
			imageModules, binaries, missing, extra)
	}
}
