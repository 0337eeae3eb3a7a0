// Command lua runs Argo CD health, discovery and action scripts exactly as Argo CD does, through
// Argo CD's own util/lua package (gopher-lua, its safe os library, the 1 s timeout, gopher-json
// encoding, a fresh Lua state per call), so the project's Rust tests can ask it.
//
// It reads one JSON request per line on standard input and writes one JSON answer per line:
//
//	{"op":"health","script":"…","object":{…},"openLibs":false}
//	  → {"health":{"status":"Healthy","message":"…"}}   ("health":null when the script returns nil)
//	{"op":"discovery","script":"…","object":{…},"openLibs":false}
//	  → {"actions":[{"name":"approve","disabled":false,…}]}   (sorted by name)
//	{"op":"action","script":"…","object":{…},"openLibs":false,"params":{"k":"v"}}
//	  → {"resources":[{"resource":{…},"operation":"patch"}]}
//
// A script's failure answers {"error":"…"} with Argo CD's own error text; a malformed request
// answers {"error":"request: …"}. It is test tooling, not part of the product.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sort"

	applicationpkg "github.com/argoproj/argo-cd/v3/pkg/apiclient/application"
	"github.com/argoproj/argo-cd/v3/util/lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

type request struct {
	Op       string            `json:"op"`
	Script   string            `json:"script"`
	Object   json.RawMessage   `json:"object"`
	OpenLibs bool              `json:"openLibs"`
	Params   map[string]string `json:"params"`
}

type answer struct {
	Health    any    `json:"health,omitempty"`
	Actions   any    `json:"actions,omitempty"`
	Resources any    `json:"resources,omitempty"`
	Error     string `json:"error,omitempty"`
	// Null is set when a health script returned nil (Argo CD then keeps its own health).
	Null bool `json:"null,omitempty"`
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	// Objects with long plans in their status can be large.
	in.Buffer(make([]byte, 0, 1<<20), 64<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		if err := out.Encode(serve(in.Bytes())); err != nil {
			fmt.Fprintln(os.Stderr, "lua:", err)
			os.Exit(1)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "lua:", err)
		os.Exit(1)
	}
}

func serve(line []byte) answer {
	var req request
	if err := json.Unmarshal(line, &req); err != nil {
		return answer{Error: "request: " + err.Error()}
	}
	// Decoded as the application controller holds live objects (integers as int64).
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(req.Object); err != nil {
		return answer{Error: "request: object: " + err.Error()}
	}
	vm := lua.VM{UseOpenLibs: req.OpenLibs}
	switch req.Op {
	case "health":
		status, err := vm.ExecuteHealthLua(obj, req.Script)
		if err != nil {
			return answer{Error: err.Error()}
		}
		if status == nil {
			return answer{Null: true}
		}
		return answer{Health: status}
	case "discovery":
		actions, err := vm.ExecuteResourceActionDiscovery(obj, []string{req.Script})
		if err != nil {
			return answer{Error: err.Error()}
		}
		// Argo CD builds the list from a Go map: its order means nothing.
		sort.Slice(actions, func(i, j int) bool { return actions[i].Name < actions[j].Name })
		return answer{Actions: actions}
	case "action":
		var params []*applicationpkg.ResourceActionParameters
		for name, value := range req.Params {
			params = append(params, &applicationpkg.ResourceActionParameters{Name: &name, Value: &value})
		}
		resources, err := vm.ExecuteResourceAction(obj, req.Script, params)
		if err != nil {
			return answer{Error: err.Error()}
		}
		return answer{Resources: resources}
	default:
		return answer{Error: fmt.Sprintf("request: unknown op %q", req.Op)}
	}
}
