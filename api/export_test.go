package api

// RoutesOf lists the routes s serves, but /metrics, as "METHOD /path" with
// the query parameters each takes.
func RoutesOf(s *Server) map[string][]string {
	out := map[string][]string{}
	for _, rt := range s.routes() {
		out[rt.method+" "+rt.path] = rt.query
	}
	return out
}
