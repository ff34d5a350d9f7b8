package boot

import "errors"

// ErrPlan marks errors found while resolving a plan, before any BMC call.
var ErrPlan = errors.New("boot plan")

// ErrRequest marks a request that is wrong on its own, whatever the image
// or the BMC: an unknown policy or method, install flags that contradict
// each other, a malformed artifact server URL. Session finds these before
// any registry or BMC request (serverboot exits 2). It is also ErrPlan, so
// callers that sort plan failures from retryable ones need no new case.
var ErrRequest error = requestError{}

type requestError struct{}

func (requestError) Error() string        { return "boot request" }
func (requestError) Is(target error) bool { return target == ErrPlan }
