// Package runnelv1gw is the REST gateway of the runnel.v1 services
// (grpc-gateway, generated standalone by proto/gen.sh) and their OpenAPI
// document. It is apart from proto/runnelv1 so that what links only the
// messages and services, runnel-edge, does not link grpc-gateway
// (cmd/runnel-edge's TestLinksNothingOfTheHub checks it). runnel-hub
// serves it in front of an in-process gRPC server (hub/server, http.go).
package runnelv1gw
