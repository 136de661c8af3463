package volumes

// Settled is settled, for the tests of package volumes_test.
var Settled = settled
