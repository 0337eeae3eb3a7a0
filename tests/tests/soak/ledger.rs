//! The outside witness: a TCP server on the host that each resource's provisioner reports to
//! from inside its runner container (`start`/`done` around a create, `destroy`), outside
//! Terraform's state and tfops' records, with the identity the container ran as (the subject
//! of its ServiceAccount token). Each line is kept with the time it arrived.

use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::io::{AsyncBufReadExt, BufReader};

/// What a provisioner reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A create began (the provisioner runs after Terraform created the resource).
    Start,
    /// The create's provisioner ended (Terraform writes the state after it).
    Done,
    /// The resource's destroy began.
    Destroy,
}

/// One line of the ledger.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    /// When it arrived.
    pub(crate) at: Instant,
    /// What happened.
    pub(crate) kind: Kind,
    /// The object incarnation (`<namespace>/<name>#<n>`).
    pub(crate) owner: String,
    /// What was applied (`<stamp>/<rev>`).
    pub(crate) content: String,
    /// Who ran it: `system:serviceaccount:<namespace>:<name>` (`-`: no token in the container).
    pub(crate) identity: String,
}

/// The ledger server and what it received.
#[derive(Clone)]
pub(crate) struct Ledger {
    /// Where provisioners connect.
    pub(crate) addr: SocketAddr,
    entries: Arc<Mutex<Vec<Entry>>>,
}

impl Ledger {
    /// Listens on `host` (the container network's gateway), appending every line to `file`.
    pub(crate) async fn start(host: &str, file: &Path) -> Self {
        let listener = tokio::net::TcpListener::bind((host, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let entries = Arc::new(Mutex::new(Vec::new()));
        let kept = entries.clone();
        let mut out = std::fs::File::create(file).unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let tx = tx.clone();
                tokio::spawn(async move {
                    let mut lines = BufReader::new(socket).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        let _ = tx.send(line);
                    }
                });
            }
        });
        let start = Instant::now();
        tokio::spawn(async move {
            while let Some(line) = rx.recv().await {
                let at = Instant::now();
                let _ = writeln!(out, "{:.3} {line}", at.duration_since(start).as_secs_f64());
                if let Some(entry) = parse(at, &line) {
                    kept.lock().unwrap().push(entry);
                }
            }
        });
        Self { addr, entries }
    }

    /// Everything received so far, in order of arrival.
    pub(crate) fn entries(&self) -> Vec<Entry> {
        self.entries.lock().unwrap().clone()
    }
}

fn parse(at: Instant, line: &str) -> Option<Entry> {
    let mut words = line.split_whitespace();
    let kind = match words.next()? {
        "start" => Kind::Start,
        "done" => Kind::Done,
        "destroy" => Kind::Destroy,
        _ => return None,
    };
    Some(Entry {
        at,
        kind,
        owner: words.next()?.to_string(),
        content: words.next()?.to_string(),
        identity: words.next().unwrap_or("-").to_string(),
    })
}

/// Prints the subject of the container's ServiceAccount token (the JWT's payload is base64url
/// without padding), or `-`. Bash in Terraform's heredoc: `$${` is a literal `${`.
const WHO: &str = r#"who() { t=$(cut -d. -f2 /var/run/secrets/kubernetes.io/serviceaccount/token 2>/dev/null | tr '_-' '/+'); while (( $${#t} % 4 )); do t="$t="; done; s=$(echo "$t" | base64 -d 2>/dev/null | grep -o '"sub":"[^"]*"' | cut -d'"' -f4); echo "$${s:--}"; }"#;

/// The Terraform configuration of one object at revision `rev`: a resource whose create and
/// destroy report to the ledger at `addr`, with the identity they ran as; the create takes
/// `seconds` so that faults land mid-apply. Its content, `<stamp>/<rev>`, changes with the
/// `stamp` variable and `rev`.
pub(crate) fn config(addr: SocketAddr, rev: u32, seconds: u32) -> String {
    let report = |what: &str| {
        format!(
            "echo {what} ${{self.triggers_replace}} $(who) > /dev/tcp/{}/{}",
            addr.ip(),
            addr.port()
        )
    };
    format!(
        r#"variable "owner" {{
  type = string
}}
variable "stamp" {{
  type = string
}}
locals {{
  rev = "{rev}"
}}
resource "terraform_data" "w" {{
  triggers_replace = "${{var.owner}} ${{var.stamp}}/${{local.rev}}"
  provisioner "local-exec" {{
    interpreter = ["/bin/bash", "-c"]
    command     = <<-EOT
      {who}
      {start} && sleep {seconds} && {done}
    EOT
  }}
  provisioner "local-exec" {{
    when        = destroy
    interpreter = ["/bin/bash", "-c"]
    command     = <<-EOT
      {who}
      {destroy}
    EOT
  }}
}}
output "content" {{
  value = terraform_data.w.triggers_replace
}}
"#,
        who = WHO,
        start = report("start"),
        done = report("done"),
        destroy = report("destroy"),
    )
}
