package settings

import (
	"io"
	"log/slog"
)

// Log is the log section every program's config shares: log.level and
// log.format (see LogSettings).
type Log struct {
	Level  LogLevel
	Format LogFormat
}

// LogLevel is the least severe level logged.
type LogLevel string

const (
	LevelDebug LogLevel = "debug"
	LevelInfo  LogLevel = "info"
	LevelWarn  LogLevel = "warn"
	LevelError LogLevel = "error"
)

// Slog converts l to a slog.Level; an unknown level is slog.LevelInfo.
func (l LogLevel) Slog() slog.Level {
	switch l {
	case LevelDebug:
		return slog.LevelDebug
	case LevelWarn:
		return slog.LevelWarn
	case LevelError:
		return slog.LevelError
	}
	return slog.LevelInfo
}

// LogFormat is how log records are written.
type LogFormat string

const (
	FormatText LogFormat = "text" // slog.TextHandler: key=value, for people
	FormatJSON LogFormat = "json" // slog.JSONHandler: for log shippers
)

// Logger returns the logger l describes, writing to w.
func (l Log) Logger(w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: l.Level.Slog()}
	if l.Format == FormatJSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// LogSettings returns the log.level and log.format settings of a table
// whose variables start with envPrefix and whose config keeps its Log where
// log points.
func LogSettings[C any](envPrefix string, log func(*C) *Log) []*Setting[C] {
	return []*Setting[C]{
		{Path: "log.level", Flag: "log-level", Env: envPrefix + "LOG_LEVEL", Default: "info",
			Doc:   "Least severe level logged: debug, info, warn or error.",
			Value: Enum(func(c *C) *LogLevel { return &log(c).Level }, LevelInfo, LevelDebug, LevelWarn, LevelError)},
		{Path: "log.format", Flag: "log-format", Env: envPrefix + "LOG_FORMAT", Default: "text",
			Doc:   "Log format: text (key=value) or json.",
			Value: Enum(func(c *C) *LogFormat { return &log(c).Format }, FormatText, FormatJSON)},
	}
}
