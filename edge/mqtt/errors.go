package mqtt

import "errors"

// ErrInvalidConfig is wrapped by every problem Config.Validate reports.
var ErrInvalidConfig = errors.New("mqtt: invalid config")

// ErrClosed is returned by Close when the source was already closed, and by
// WaitConnected once the source is closed.
var ErrClosed = errors.New("mqtt: source closed")

// ErrNotConnected is returned by Publish while the source has no
// connection.
var ErrNotConnected = errors.New("mqtt: not connected")

// ErrInvalidTopic is wrapped by ValidateFilter and ValidateTopic errors.
var ErrInvalidTopic = errors.New("mqtt: invalid topic")
