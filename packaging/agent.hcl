# /etc/plugvisor/agent.hcl: the settings of the agent the systemd unit
# runs (plugvisor agent -config /etc/plugvisor). Every agent flag is a key,
# its name with _ for - (docs/agent.md lists them all). Check a change with
#   plugvisor agent -config /etc/plugvisor -validate
# then `systemctl reload plugvisor` (log_level, and the token file's
# tokens) or restart (anything else).

# The state, the API socket and the watched plugins/ and specs/ directories.
data_dir = "/var/lib/plugvisor"

# Logs go to the journal; log_level reloads at SIGHUP.
log_level = "info"

# The API on TCP, off by default. On loopback it needs a token file (one
# "<token> <rights> [name]" per line, mode 0600); beyond it, TLS with client
# certificates (tls_cert, tls_key, tls_ca).
# http       = "127.0.0.1:4646"
# token_file = "/etc/plugvisor/tokens"
