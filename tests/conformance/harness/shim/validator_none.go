package main

// NRI before v0.10: no default validator.

import (
	"encoding/json"
	"fmt"

	"github.com/containerd/nri/pkg/adaptation"
)

func defaultValidatorOption(table map[string]json.RawMessage) (adaptation.Option, error) {
	if table == nil {
		return nil, nil
	}
	return nil, fmt.Errorf("harness: NRI %s has no default validator (it came in v0.10.0)", nriModuleVersion())
}
