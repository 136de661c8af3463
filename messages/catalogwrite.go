package messages

import (
	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"
)

// CatalogWrite is a command that changes the CSI catalog. The catalog
// actor takes every one the same way: applied in order, answered at
// ReplyTo (or to the sender) once durable. Only the commands of
// catalog.proto below are CatalogWrites: its queries and ShutdownCatalog
// are not.
type CatalogWrite interface {
	proto.Message
	GetReplyTo() *actor.PID
	catalogWrite()
}

func (*RegisterVolume) catalogWrite()       {}
func (*DeregisterVolume) catalogWrite()     {}
func (*RegisterVolumes) catalogWrite()      {}
func (*DeregisterVolumes) catalogWrite()    {}
func (*ClaimVolume) catalogWrite()          {}
func (*ReleaseVolume) catalogWrite()        {}
func (*MarkVolumeDeleting) catalogWrite()   {}
func (*RecordVolumeCapacity) catalogWrite() {}
func (*ExpectPlugin) catalogWrite()         {}
func (*RecordVolumeModify) catalogWrite()   {}
