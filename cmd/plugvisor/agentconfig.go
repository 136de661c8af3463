package main

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/spf13/pflag"
	"github.com/zclconf/go-cty/cty"

	cmdline "github.com/plugvisor/plugvisor/internal/cli"
)

// configFile is what an agent's config file (or directory) sets: each key
// is an agent flag's name with "_" for "-" (data_dir for -data-dir), and
// the values are those the flag would be given on the command line.
type configFile struct {
	// files are the files read, in the order they were merged.
	files []string
	// values are the flag values of each key, by flag name; a repeatable
	// flag has one value per element of its list.
	values map[string]configValue
}

// configValue is one key's value, as flag values, and where it was set.
type configValue struct {
	values []string
	where  hcl.Range
}

// notConfigKeys are the agent's flags a config file cannot set: they say
// how to read it.
var notConfigKeys = []string{"config", "validate", "help"}

// loadConfig reads the HCL file at path, or every *.hcl file of the
// directory at path in lexical order, for the flags of fs. A key set by
// a later file replaces the earlier file's value. Unknown keys, values
// of the wrong type and HCL syntax errors are refused, each naming its
// file:line:column; the error never shows a value.
func loadConfig(path string, fs *pflag.FlagSet) (configFile, error) {
	files, err := configFiles(path)
	if err != nil {
		return configFile{}, err
	}
	cfg := configFile{files: files, values: map[string]configValue{}}
	parser := hclparse.NewParser()
	var problems []error
	for _, file := range files {
		f, diags := parser.ParseHCLFile(file)
		if diags.HasErrors() {
			problems = append(problems, diagErrors(diags)...)
			continue
		}
		attrs, diags := f.Body.JustAttributes()
		problems = append(problems, diagErrors(diags)...)
		for _, attr := range sortedAttributes(attrs) {
			values, err := flagValues(attr, fs)
			if err != nil {
				problems = append(problems, err)
				continue
			}
			cfg.values[flagName(attr.Name)] = configValue{values: values, where: attr.NameRange}
		}
	}
	if len(problems) > 0 {
		return configFile{}, cmdline.Usagef("-config: %w", errors.Join(problems...))
	}
	return cfg, nil
}

// configFiles is path, or the *.hcl files of the directory path, sorted.
func configFiles(path string) ([]string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, cmdline.Usagef("-config: %w", err)
	}
	if !info.IsDir() {
		return []string{path}, nil
	}
	files, err := filepath.Glob(filepath.Join(path, "*.hcl"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, cmdline.Usagef("-config %s: the directory holds no *.hcl file", path)
	}
	slices.Sort(files)
	return files, nil
}

// apply sets every flag of fs the file sets and the command line does not:
// a flag given on the command line overrides the file.
func (c configFile) apply(fs *pflag.FlagSet) error {
	for _, name := range slices.Sorted(maps.Keys(c.values)) {
		if fs.Changed(name) {
			continue
		}
		v := c.values[name]
		for _, value := range v.values {
			if err := fs.Set(name, value); err != nil {
				return cmdline.Usagef("%s: %s: %v", position(v.where), configKey(name), err)
			}
		}
	}
	return nil
}

// flagValues is what attr sets its flag of fs to, as command-line values.
func flagValues(attr *hcl.Attribute, fs *pflag.FlagSet) ([]string, error) {
	at := position(attr.NameRange)
	name := flagName(attr.Name)
	f := fs.Lookup(name)
	if f == nil || slices.Contains(notConfigKeys, name) || strings.Contains(attr.Name, "-") {
		return nil, unknownKey(at, attr.Name, fs)
	}
	val, diags := attr.Expr.Value(nil)
	if diags.HasErrors() {
		return nil, errors.Join(diagErrors(diags)...)
	}
	at = position(attr.Expr.Range())
	if val.IsNull() {
		return nil, fmt.Errorf("%s: %s is null: give it a value or leave the key out", at, attr.Name)
	}
	if _, repeatable := f.Value.(*stringList); repeatable {
		return stringListValue(at, attr.Name, val)
	}
	v, err := scalarValue(f.Value.Type(), val)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", at, attr.Name, err)
	}
	return []string{v}, nil
}

// scalarValue is val as the command-line value of a flag of type typ.
func scalarValue(typ string, val cty.Value) (string, error) {
	switch typ {
	case "string":
		if val.Type() != cty.String {
			return "", fmt.Errorf(`want a string in double quotes, got %s`, val.Type().FriendlyName())
		}
		return val.AsString(), nil
	case "bool":
		if val.Type() != cty.Bool {
			return "", fmt.Errorf("want true or false, got %s", val.Type().FriendlyName())
		}
		return fmt.Sprint(val.True()), nil
	case "int":
		if val.Type() != cty.Number {
			return "", fmt.Errorf("want a whole number, got %s", val.Type().FriendlyName())
		}
		n, acc := val.AsBigFloat().Int64()
		if acc != big.Exact {
			return "", errors.New("want a whole number")
		}
		return fmt.Sprint(n), nil
	case "duration":
		if val.Type() != cty.String {
			return "", fmt.Errorf(`want a duration in double quotes, e.g. "30s" or "5m", got %s`, val.Type().FriendlyName())
		}
		if _, err := time.ParseDuration(val.AsString()); err != nil {
			return "", errors.New(`want a duration such as "30s" or "5m"`)
		}
		return val.AsString(), nil
	}
	return "", fmt.Errorf("a flag of type %s cannot be set from a file", typ)
}

// stringListValue is val, a list of strings, as a repeatable flag's values.
func stringListValue(at, key string, val cty.Value) ([]string, error) {
	if !val.Type().IsTupleType() && !val.Type().IsListType() {
		return nil, fmt.Errorf(`%s: %s: want a list of strings, e.g. ["a", "b"], got %s`, at, key, val.Type().FriendlyName())
	}
	var values []string
	for it := val.ElementIterator(); it.Next(); {
		_, v := it.Element()
		if v.IsNull() || v.Type() != cty.String {
			return nil, fmt.Errorf(`%s: %s: want a list of strings, e.g. ["a", "b"]; an element is %s`, at, key, v.Type().FriendlyName())
		}
		values = append(values, v.AsString())
	}
	return values, nil
}

// unknownKey is the error of a key that is no flag's, with the key it is
// closest to. A key about tokens or passwords says where they go instead.
func unknownKey(at, key string, fs *pflag.FlagSet) error {
	var keys []string
	fs.VisitAll(func(f *pflag.Flag) {
		if !slices.Contains(notConfigKeys, f.Name) {
			keys = append(keys, configKey(f.Name))
		}
	})
	msg := fmt.Sprintf("%s: unknown key %q", at, key)
	if s := cmdline.Closest(key, keys); s != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", s)
	}
	if strings.Contains(strings.ToLower(key), "token") {
		msg += `; tokens are never given inline: token_file names the file that holds them (mode 0600)`
	}
	if strings.Contains(strings.ToLower(key), "password") {
		msg += `; passwords are never given inline: cluster_etcd_password_file names the file that holds it (mode 0600)`
	}
	return errors.New(msg)
}

// sortedAttributes is attrs in the order they appear in their file.
func sortedAttributes(attrs hcl.Attributes) []*hcl.Attribute {
	list := make([]*hcl.Attribute, 0, len(attrs))
	for _, a := range attrs {
		list = append(list, a)
	}
	slices.SortFunc(list, func(a, b *hcl.Attribute) int {
		return cmp.Compare(a.NameRange.Start.Byte, b.NameRange.Start.Byte)
	})
	return list
}

// diagErrors is each error of diags, as "file:line:column: summary; detail".
func diagErrors(diags hcl.Diagnostics) []error {
	var errs []error
	for _, d := range diags {
		if d.Severity != hcl.DiagError {
			continue
		}
		msg := d.Summary
		if d.Detail != "" {
			msg += "; " + d.Detail
		}
		if d.Subject != nil {
			msg = position(*d.Subject) + ": " + msg
		}
		errs = append(errs, errors.New(msg))
	}
	return errs
}

// position is where r starts, as file:line:column.
func position(r hcl.Range) string {
	return fmt.Sprintf("%s:%d:%d", r.Filename, r.Start.Line, r.Start.Column)
}

// flagName is the flag of a config key: data_dir is -data-dir.
func flagName(key string) string { return strings.ReplaceAll(key, "_", "-") }

// configKey is the config key of a flag: -data-dir is data_dir.
func configKey(flag string) string { return strings.ReplaceAll(flag, "-", "_") }
