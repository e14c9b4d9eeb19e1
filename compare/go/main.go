// main.go: strata-compare-go, the driver that runs strata's benchmark workloads on Pebble and
// bbolt. It reads a workload spec (the JSON the Rust harness writes, crates/strata-bench's
// workload::Spec), runs it on the chosen engine in a directory with the same records, choices
// and measures as the Rust harness (crates/strata-bench's runner), and prints one RunResult JSON
// object on stdout. Progress goes to stderr; errors go to stderr with a non-zero exit.
//
//	strata-compare-go --engine pebble|bbolt --spec SPEC.json --dir DIR [--quiet]
//	strata-compare-go --version
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
)

// engines are the engines this driver runs, by their names in results.
var engines = map[string]Engine{
	"pebble": pebbleEngine{},
	"bbolt":  bboltEngine{},
}

// moduleVersion is "path version" of a module the binary was built with, or "path (unknown
// version)" when the build information does not say.
func moduleVersion(path string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path != path {
				continue
			}
			if d.Replace != nil {
				return d.Path + " " + d.Version + " (replaced by " + d.Replace.Path + " " + d.Replace.Version + ")"
			}
			return d.Path + " " + d.Version
		}
	}
	return path + " (unknown version)"
}

// engineVersion is what the results say about an engine's build: its module and Go's version.
func engineVersion(modulePath string) string {
	return moduleVersion(modulePath) + ", " + runtime.Version()
}

func main() {
	engine := flag.String("engine", "", "the engine: pebble or bbolt")
	specPath := flag.String("spec", "", "the workload spec (JSON, as strata-bench writes it)")
	dir := flag.String("dir", "", "the database directory (created if missing)")
	quiet := flag.Bool("quiet", false, "no progress on stderr")
	version := flag.Bool("version", false, "print the engines' versions and exit")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: strata-compare-go --engine pebble|bbolt --spec SPEC.json --dir DIR [--quiet]\n"+
			"       strata-compare-go --version\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *version {
		for _, name := range []string{"pebble", "bbolt"} {
			fmt.Printf("%s: %s\n", name, engines[name].Version())
		}
		return
	}
	if err := mainErr(*engine, *specPath, *dir, *quiet); err != nil {
		fmt.Fprintf(os.Stderr, "strata-compare-go: %v\n", err)
		os.Exit(1)
	}
}

func mainErr(engineName, specPath, dir string, quiet bool) error {
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	e, ok := engines[engineName]
	if !ok {
		return fmt.Errorf("unknown engine %q (expected pebble or bbolt)", engineName)
	}
	if specPath == "" || dir == "" {
		return fmt.Errorf("--spec and --dir are required")
	}
	text, err := os.ReadFile(specPath)
	if err != nil {
		return fmt.Errorf("reading the spec: %w", err)
	}
	spec, err := parseSpec(text)
	if err != nil {
		return fmt.Errorf("%s: %w", specPath, err)
	}
	var progress Progress
	if !quiet {
		progress = func(label string, done, total uint64) {
			if done == total {
				fmt.Fprintf(os.Stderr, "%s: %s: %d/%d\n", engineName, label, done, total)
			}
		}
	}
	result, err := run(e, spec, dir, progress)
	if err != nil {
		return err
	}
	out, err := json.Marshal(result)
	if err != nil {
		return fmt.Errorf("encoding the result: %w", err)
	}
	out = append(out, '\n')
	_, err = os.Stdout.Write(out)
	return err
}
