package model

// Idle reports whether the limiter holds nothing worth keeping at now.
func (l *Limiter) Idle(now int64) bool {
	return (len(l.Hits) == 0 || l.Hits[len(l.Hits)-1] <= now-PaceWindowMs) && l.PausedUntil <= now && len(l.ModelPaused) == 0
}

// PendingChanges reports how many records wait to be collected.
func (e *Engine) PendingChanges() int { return len(e.changes) }
