package main

// NRI v0.10 and later: the built-in default validator (required plugins and the
// rest). The "start" command's default_validator object is keyed by the TOML
// names the runtimes' configuration uses (the struct's own toml tags, read by
// reflection here), so a key this NRI release does not read is an error and a
// test feeding it a runtime configuration checks our key names against the
// library's.

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/containerd/nri/pkg/adaptation"
	validator "github.com/containerd/nri/plugins/default-validator"
)

func defaultValidatorOption(table map[string]json.RawMessage) (adaptation.Option, error) {
	if table == nil {
		return nil, nil
	}
	cfg := &validator.DefaultValidatorConfig{}
	v := reflect.ValueOf(cfg).Elem()
	t := v.Type()
	known := map[string]int{}
	for i := 0; i < t.NumField(); i++ {
		if tag := strings.Split(t.Field(i).Tag.Get("toml"), ",")[0]; tag != "" {
			known[tag] = i
		}
	}
	for key, raw := range table {
		i, ok := known[key]
		if !ok {
			names := make([]string, 0, len(known))
			for k := range known {
				names = append(names, k)
			}
			sort.Strings(names)
			return nil, fmt.Errorf("harness: default_validator key %q is not read by NRI %s; it reads %s",
				key, nriModuleVersion(), strings.Join(names, ", "))
		}
		field := reflect.New(t.Field(i).Type)
		if err := json.Unmarshal(raw, field.Interface()); err != nil {
			return nil, fmt.Errorf("harness: default_validator key %q: %w", key, err)
		}
		v.Field(i).Set(field.Elem())
	}
	return adaptation.WithDefaultValidator(cfg), nil
}
