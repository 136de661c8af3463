package agent

// Validate checks cfg as Start does before it opens anything: every
// problem of the settings, each naming its field. It reads no file and
// binds nothing, so a config can be checked where the agent runs without
// stopping it (plugvisor agent -validate).
func (c Config) Validate() error { return c.validate() }
