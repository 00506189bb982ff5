package pool

// Change notification: the pools' state (members, their states, episodes)
// as Pools, List and Desktops report it changes under m.mu, and each change
// closes the channel Changed returned. A watcher (the web dashboard's live
// feed, a cluster agent's publisher) re-reads them when it is closed;
// nothing is queued, so a slow watcher sees one change for many and never
// holds the pool up.

// Changed returns a channel that is closed at the next change of what
// Pools, List or Desktops report.
func (m *Manager) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.changed == nil {
		m.changed = make(chan struct{})
	}
	return m.changed
}

// changedLocked announces a change to Changed's callers.
func (m *Manager) changedLocked() {
	if m.changed != nil {
		close(m.changed)
		m.changed = nil
	}
}
