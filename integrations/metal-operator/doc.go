// Package metaloperator lets a metal-operator controller boot a Server with
// os-builder's boot driver: Boot takes metal-operator's own API objects
// (ServerClaim, ServerBootConfiguration, Server, BMC, Endpoint, BMCSecret),
// resolves the image, the BMC endpoint, its credentials and the boot policy
// from them, runs the plan and returns metav1.Conditions for the
// ServerBootConfiguration's status. Adapter offers the driver metal-operator's
// own bmc.BMC client where that is the only client at hand.
//
// It is a module of its own so the main module stays free of Kubernetes.
package metaloperator
