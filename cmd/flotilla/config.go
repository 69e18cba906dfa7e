package main

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"
)

// applyConfigFile sets the flags named in a YAML file (keys are flag names without --, as
// k3s reads its config.yaml), except those given on the command line: flags win. A list sets
// a repeatable flag once per item; a map sets a key=value flag once per entry.
func applyConfigFile(fs *pflag.FlagSet, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	var settings map[string]any
	if err := yaml.Unmarshal(data, &settings); err != nil {
		return fmt.Errorf("--config %s: not a YAML map of settings: %w", path, err)
	}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		f := fs.Lookup(strings.TrimPrefix(key, "--"))
		if f == nil || f.Name == "config" {
			return fmt.Errorf("--config %s: unknown setting %q: use the name of a flag of `flotilla agent --help`, without --", path, key)
		}
		if f.Changed {
			continue
		}
		var values []string
		switch v := settings[key].(type) {
		case []any:
			for _, item := range v {
				values = append(values, scalar(item))
			}
		case map[string]any:
			entries := make([]string, 0, len(v))
			for k, item := range v {
				entries = append(entries, k+"="+scalar(item))
			}
			sort.Strings(entries)
			values = entries
		case nil:
			continue
		default:
			values = []string{scalar(v)}
		}
		for _, val := range values {
			if err := f.Value.Set(val); err != nil {
				return fmt.Errorf("--config %s: %s: %q: %w", path, key, val, err)
			}
		}
	}
	return nil
}

// scalar renders a YAML scalar as the command line would spell it (JSON numbers decode as
// float64; a whole number must not become 6.443e+03).
func scalar(v any) string {
	if f, ok := v.(float64); ok && f == float64(int64(f)) {
		return fmt.Sprintf("%d", int64(f))
	}
	return fmt.Sprint(v)
}
