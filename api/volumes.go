package api

import "net/http"

// Volumes is the volume side of the API: the CSI catalog and the volume
// manager behind one interface, wired by the agent.
type Volumes interface{}

func (s *Server) volumeRoutes(route func(string, func(http.ResponseWriter, *http.Request) error)) {}

func isInvalid(error) bool  { return false }
func isNotFound(error) bool { return false }
func isConflict(error) bool { return false }
