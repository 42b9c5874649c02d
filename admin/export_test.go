package admin

// SetCompensateHook runs f between a compensation's status check and its
// handler call, for the test that forces a concurrent replay there.
func SetCompensateHook(s *Service, f func()) { s.afterCompensateCheck = f }
