package member

import (
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/fleet"
)

// ErrUnsigned is a grain's answer to a request that no key of its
// keyring signed (messages/fleet.proto): it did not come from a member of
// this fleet. Nothing changed.
var ErrUnsigned = errclass.New(errclass.Denied, "request not signed with the fleet's keyring")

// signable is what the signature of a request covers: its deterministic
// encoding with key_id and signature empty.
func signable(msg proto.Message) ([]byte, error) {
	c := proto.Clone(msg)
	m := c.ProtoReflect()
	for _, name := range []protoreflect.Name{"key_id", "signature"} {
		if fd := m.Descriptor().Fields().ByName(name); fd != nil {
			m.Clear(fd)
		}
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(c)
}

// sign signs msg with keyring's primary key (nothing without a keyring).
func sign(keyring *fleet.Keyring, msg proto.Message) error {
	if keyring == nil {
		return nil
	}
	data, err := signable(msg)
	if err != nil {
		return err
	}
	id, sig := keyring.Sign(data)
	m := msg.ProtoReflect()
	fields := m.Descriptor().Fields()
	m.Set(fields.ByName("key_id"), protoreflect.ValueOfString(id))
	m.Set(fields.ByName("signature"), protoreflect.ValueOfBytes(sig))
	return nil
}

// checkSignature refuses msg unless a key of keyring signed it (anything
// goes without a keyring).
func checkSignature(keyring *fleet.Keyring, msg proto.Message) error {
	if keyring == nil {
		return nil
	}
	m := msg.ProtoReflect()
	fields := m.Descriptor().Fields()
	id, sig := m.Get(fields.ByName("key_id")).String(), m.Get(fields.ByName("signature")).Bytes()
	data, err := signable(msg)
	if err == nil && len(sig) > 0 && keyring.Verify(id, data, sig) {
		return nil
	}
	return model.Refusal(ErrUnsigned, fmt.Errorf("%s (key %q): it did not come from a member of this fleet, or its keyring lacks that key", describe(msg), id))
}
