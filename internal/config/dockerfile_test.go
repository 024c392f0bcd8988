package config_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// instruction is one instruction of a Dockerfile: its keyword, upper-cased,
// and the rest, with continued lines joined.
type instruction struct {
	keyword, args string
}

// readDockerfile returns the repository's Dockerfile's instructions, in order.
func readDockerfile(t *testing.T) []instruction {
	t.Helper()
	raw, err := os.ReadFile("../../Dockerfile")
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
