package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCountFitsTheNounToTheNumber(t *testing.T) {
	require.Equal(t, "0 healthy nodes", count(0, "healthy node"))
	require.Equal(t, "1 healthy node", count(1, "healthy node"))
	require.Equal(t, "3 healthy nodes", count(3, "healthy node"))
	require.Equal(t, "2 replies", count(2, "reply", "replies"))
	require.Equal(t, "1 reply", count(1, "reply", "replies"))
}
