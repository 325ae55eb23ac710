package proc

// TableSocketUID is tableSocketUID, the way without sock_diag, for the tests.
var TableSocketUID = tableSocketUID
