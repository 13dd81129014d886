// celoracle evaluates CEL as kube-scheduler does for DRA device selectors: the selector compiler of
// k8s.io/dynamic-resource-allocation/cel (compile.go), built against the Kubernetes version the real tier
// runs (hack/cluster/build.sh celoracle). tests/real/test_real_cel.py holds gangkeeper's evaluator to it.
//
// stdin, one JSON object a line:
//
//	{"expression": "...", "driver": "...", "attributes": {...}, "capacity": {...}, "shared": false}
//	    a selector on that device: {"matches": bool}
//	{"expression": "...", "value": true}
//	    any expression not reading `device`, in the selectors' environment: {"value": ..., "type": "..."}
//
// An error is {"error": "...", "compile": bool}: compile errors are what the API server refuses at create.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"

	resourceapi "k8s.io/api/resource/v1"
	dracel "k8s.io/dynamic-resource-allocation/cel"
)

type input struct {
	Expression string                                                    `json:"expression"`
	Driver     string                                                    `json:"driver"`
	Attributes map[resourceapi.QualifiedName]resourceapi.DeviceAttribute `json:"attributes"`
	Capacity   map[resourceapi.QualifiedName]resourceapi.DeviceCapacity  `json:"capacity"`
	Shared     bool                                                      `json:"shared"`
	Value      bool                                                      `json:"value"`
}

type compiler interface {
	CompileCELExpression(string, dracel.Options) dracel.CompilationResult
}

// value evaluates an expression of any type in the selectors' environment, with no variables bound.
func value(c compiler, expression string) map[string]any {
	env := c.CompileCELExpression("true", dracel.Options{}).Environment
	ast, issues := env.Compile(expression)
	if issues != nil && issues.Err() != nil {
		return map[string]any{"error": issues.Err().Error(), "compile": true}
	}
	program, err := env.Program(ast)
	if err != nil {
		return map[string]any{"error": err.Error(), "compile": true}
	}
	val, _, err := program.Eval(map[string]any{})
	if err != nil {
		return map[string]any{"error": err.Error(), "compile": false}
	}
	switch v := val.Value().(type) {
	case string, bool, int64, uint64:
		return map[string]any{"value": v, "type": val.Type().TypeName()}
	}
	return map[string]any{"value": fmt.Sprintf("%v", val.Value()), "type": val.Type().TypeName()}
}

func selector(c compiler, in input) map[string]any {
	result := c.CompileCELExpression(in.Expression, dracel.Options{})
	if result.Error != nil {
		return map[string]any{"error": result.Error.Error(), "compile": true}
	}
	shared := in.Shared
	matches, _, err := result.DeviceMatches(context.Background(), dracel.Device{
		Driver: in.Driver, AllowMultipleAllocations: &shared, Attributes: in.Attributes, Capacity: in.Capacity,
	})
	if err != nil {
		return map[string]any{"error": err.Error(), "compile": false}
	}
	return map[string]any{"matches": matches}
}

func main() {
	// DRAConsumableCapacity is beta and on by default from 1.36; list-type attributes are alpha (off)
	c := dracel.GetCompiler(dracel.Features{EnableConsumableCapacity: true})
	scanner := bufio.NewScanner(os.Stdin)
	scanner.Buffer(make([]byte, 1<<20), 1<<24)
	out := json.NewEncoder(os.Stdout)
	for scanner.Scan() {
		var in input
		if err := json.Unmarshal(scanner.Bytes(), &in); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		var answer map[string]any
		if in.Value {
			answer = value(c, in.Expression)
		} else {
			answer = selector(c, in)
		}
		if err := out.Encode(answer); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
}
