package model

import "github.com/plugvisor/plugvisor/names"

// MaxExpected bounds an expected count of a plugin: more instances than
// any fleet runs is a typo.
const MaxExpected = 100000

// CheckExpectation is nil when name and the counts make a valid
// expectation, else ErrInvalid naming the field and its bounds.
func CheckExpectation(name string, nodes, controllers int) error {
	if err := names.Check("plugin name", name); err != nil {
		return Refusal(ErrInvalid, err)
	}
	for _, c := range []struct {
		field string
		n     int
	}{{"nodes", nodes}, {"controllers", controllers}} {
		if c.n < 0 || c.n > MaxExpected {
			return Refusef(ErrInvalid,
				"plugin %q: %s is %d; give a count from 0 to %d (0 for both removes the expectation)", name, c.field, c.n, MaxExpected)
		}
	}
	return nil
}

// The jobs an expectation stands for, one per service: a fleet's
// expectation record and a lone agent's plugin record both keep them.
const (
	ExpectNodesJob       = "expected-nodes"
	ExpectControllersJob = "expected-controllers"
)

// Expect sets p's expectation, checked with CheckExpectation: nodes node
// instances and controllers controller instances, as its two expectation
// jobs; zero for both removes them. Bad counts change nothing.
func (p *CSIPlugin) Expect(nodes, controllers int) error {
	if err := CheckExpectation(p.ID, nodes, controllers); err != nil {
		return err
	}
	if nodes == 0 && controllers == 0 {
		p.DeleteJob(ExpectNodesJob)
		p.DeleteJob(ExpectControllersJob)
		return nil
	}
	for _, j := range []PluginJob{{ExpectNodesJob, PluginTypeNode, nodes}, {ExpectControllersJob, PluginTypeController, controllers}} {
		if err := p.SetJob(j); err != nil {
			return err
		}
	}
	return nil
}
