// Command tenantplane-authn-check reads an apiserver.config.k8s.io AuthenticationConfiguration (JSON or
// YAML) on stdin and checks it with kube-apiserver's own code: the strict decoder, the validation and the
// CEL compiler of k8s.io/apiserver, at the version the tenant API servers run. It prints a JSON array of
// {"field", "message"} (empty when the configuration loads) and exits 0; 2 when stdin cannot be read.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	api "k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/apis/apiserver/install"
	"k8s.io/apiserver/pkg/apis/apiserver/validation"
	authenticationcel "k8s.io/apiserver/pkg/authentication/cel"
)

// problem is one reason kube-apiserver would refuse the configuration.
type problem struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

func main() {
	data, err := io.ReadAll(io.LimitReader(os.Stdin, 1<<20))
	if err != nil {
		fmt.Fprintf(os.Stderr, "reading stdin: %v\n", err)
		os.Exit(2)
	}
	out, err := json.Marshal(check(data))
	if err != nil {
		fmt.Fprintf(os.Stderr, "writing the result: %v\n", err)
		os.Exit(2)
	}
	fmt.Println(string(out))
}

// check decodes data as kube-apiserver does for --authentication-config and validates it.
func check(data []byte) []problem {
	scheme := runtime.NewScheme()
	install.Install(scheme)
	codecs := serializer.NewCodecFactory(scheme, serializer.EnableStrict)
	decoded, err := runtime.Decode(codecs.UniversalDecoder(), data)
	if err != nil {
		return []problem{{Field: "", Message: err.Error()}}
	}
	config, ok := decoded.(*api.AuthenticationConfiguration)
	if !ok {
		return []problem{{Field: "", Message: fmt.Sprintf("expected an AuthenticationConfiguration, got %T", decoded)}}
	}
	problems := []problem{}
	for _, e := range validation.ValidateAuthenticationConfiguration(authenticationcel.NewDefaultCompiler(), config, nil) {
		problems = append(problems, problem{Field: e.Field, Message: e.ErrorBody()})
	}
	return problems
}
