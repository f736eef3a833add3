// The service's JSON API (/api/v1/...), the same one scripts use; the bearer token asked for once per
// browser session when the service wants one.
export async function api(path) {
  for (let attempt = 0; attempt < 2; attempt++) {
    const headers = {};
    const token = sessionStorage.getItem("whyslow-token");
    if (token) headers.Authorization = "Bearer " + token;
    const r = await fetch(path, { headers });
    if (r.status === 401 && attempt === 0) {
      const t = prompt("This whyslow service needs its bearer token:");
      if (!t) break;
      sessionStorage.setItem("whyslow-token", t.trim());
      continue;
    }
    const body = await r.json();
    if (!r.ok) throw new Error(body.error || r.statusText);
    return body;
  }
  throw new Error("unauthorized");
}

// Query parameters, those without a value left out.
export function q(params) {
  return Object.entries(params).filter(([, v]) => v !== null && v !== undefined)
    .map(([k, v]) => k + "=" + encodeURIComponent(v)).join("&");
}
