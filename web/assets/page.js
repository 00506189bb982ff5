// Every page: once the server has taken ?token= into its cookie, drop it
// from the address bar, so that it stays out of history, bookmarks and
// screen shares. The server sets the cookie only for a token it checked.
(() => {
  const u = new URL(location.href);
  if (!u.searchParams.has('token')) return;
  u.searchParams.delete('token');
  history.replaceState(history.state, '', u.pathname + u.search + u.hash);
})();
