//! `plangate demo`: the worked example of plan mode in one command,
//! offline, narrated so a person understands plan mode from the output
//! alone.
//!
//! Everything is real except the person: a gateway built in this process
//! from the zero-config demo setup (the embedded demo site, started as this
//! binary's `demo-site` child), a fresh SQLite store and site state in a
//! temporary directory (never the user's data dir), a write key, and an
//! rmcp client talking to the gateway over an in-memory duplex, exactly as
//! an agent would over stdio. The person's "yes" is simulated, and the
//! output says so where it happens.

use std::time::Instant;

use anyhow::{Context, Result, anyhow, bail};
use plangate_core::{Actor, Channel, Scope};
use plangate_gateway::operator::{self, factor};
use plangate_gateway::{Gateway, GatewayHandler};
use plangate_store::{DataDir, StoreConfig};
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, ProtocolVersion,
};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

type Client = RunningService<RoleClient, ClientConfig>;

/// Prints the story: headings and facts as text, or every answer as one
/// JSON line.
struct Narrator {
    json: bool,
    section: u32,
}

/// Writes one line to stdout, screened like every line the CLI prints
/// (`output`); a reader that went away (`| head`) does not stop the demo,
/// which still cleans up after itself.
fn emit(line: &str) {
    use std::io::Write;
    let _ = writeln!(
        std::io::stdout().lock(),
        "{}",
        plangate_core::screen(line).marked()
    );
}

impl Narrator {
    fn heading(&mut self, title: &str) {
        if self.json {
            return;
        }
        self.section += 1;
        let line = format!("{}. {title}", self.section);
        emit("");
        emit(&line);
        emit(&"-".repeat(line.chars().count()));
    }

    fn fact(&self, text: impl AsRef<str>) {
        if !self.json {
            emit(text.as_ref());
        }
    }

    fn record(&self, line: Value) -> Result<()> {
        if self.json {
            emit(&plangate_core::screen_json(&serde_json::to_string(&line)?));
        }
        Ok(())
    }

    /// Calls `tool` as the agent, shows the call, records the answer and
    /// returns its structured content. A refused call ends the demo.
    async fn call(&self, client: &Client, phase: &str, tool: &str, args: Value) -> Result<Value> {
        if !self.json {
            let shown = if args.as_object().is_some_and(|a| a.is_empty()) {
                String::new()
            } else {
                format!(" {args}")
            };
            emit(&format!("→ the agent calls {tool}{shown}"));
        }
        let mut params = CallToolRequestParams::new(tool.to_owned());
        params.arguments = args.as_object().cloned();
        let result = client
            .peer()
            .call_tool(params)
            .await
            .with_context(|| format!("the demo's call to {tool} failed"))?;
        let answer = result.structured_content.clone().unwrap_or(Value::Null);
        self.record(json!({
            "phase": phase,
            "tool": tool,
            "arguments": args,
            "is_error": result.is_error == Some(true),
            "answer": answer,
        }))?;
        if result.is_error == Some(true) {
            let text = result
                .content
                .iter()
                .find_map(|c| c.as_text().map(|t| t.text.clone()))
                .unwrap_or_default();
            bail!("the demo's call to {tool} was refused: {text}");
        }
        Ok(answer)
    }
}

/// `plangate demo [--json]`.
pub async fn run(as_json: bool) -> Result<()> {
    let started = Instant::now();
    let tmp = tempfile::Builder::new()
        .prefix("plangate-demo-")
        .tempdir()
        .context("cannot create a temporary directory for the demo")?;
    let data_dir = tmp.path().join("data");
    let site_file = tmp.path().join("demo-site.json");
    let exe = std::env::current_exe().context("cannot find plangate's own executable")?;
    let config = crate::commands::demo_config(&exe, &site_file);
    let dir = DataDir::open(&data_dir)
        .with_context(|| format!("cannot use data dir {}", data_dir.display()))?;
    let store = StoreConfig::Sqlite(dir.sqlite_path())
        .open()
        .await
        .context("cannot open the demo's database")?;
    // Fresh keys for a throwaway store: never the environment's.
    let material = dir.key_material(&plangate_store::KeysFromEnv::default())?;
    // A `plan`-scope key, as the README recommends: the agent cannot
    // approve or apply its own plan; a person's yes (simulated) does.
    let key = store.create_key("demo-agent", Scope::Plan).await?;
    let gw = Gateway::build(config, store, material).await;
    let result = async {
        if gw.upstream("site").is_none() {
            let why = gw.down_upstreams().remove("site").unwrap_or_default();
            bail!("the demo site did not start: {why}");
        }
        let (client_io, server_io) = tokio::io::duplex(256 * 1024);
        let handler = GatewayHandler::stdio(gw.clone(), Some(key.token.clone()));
        let server = tokio::spawn(async move {
            if let Ok(running) = handler.serve(server_io).await {
                let _ = running.waiting().await;
            }
        });
        let info = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("plangate-demo", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25);
        let client = info
            .serve(client_io)
            .await
            .map_err(|e| anyhow!("the demo client could not connect: {e}"))?;
        let mut n = Narrator {
            json: as_json,
            section: 0,
        };
        let told = tell(&mut n, (&client, &gw, &key.key), tmp.path()).await;
        let _ = client.cancel().await;
        let _ = server.await;
        told
    }
    .await;
    gw.shutdown().await;
    drop(gw);
    result?;
    if !as_json {
        emit("");
        emit(&format!(
            "Done in {:.1} s. The temporary directory is removed; nothing of yours was touched.",
            started.elapsed().as_secs_f64()
        ));
        emit(
            "To put plan mode in front of your own agent: `plangate serve` and the README's \"Add plangate to your agent\".",
        );
    }
    drop(tmp);
    Ok(())
}

fn pages(answer: &Value) -> &[Value] {
    answer["pages"].as_array().map(Vec::as_slice).unwrap_or(&[])
}

fn main_menu(menus: &Value) -> Vec<Value> {
    menus["menus"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["name"] == "main")
        .and_then(|m| m["items"].as_array().cloned())
        .unwrap_or_default()
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

fn show_site(n: &Narrator, pages_answer: &Value, menus_answer: &Value) {
    n.fact("Pages:");
    let width = pages(pages_answer)
        .iter()
        .map(|p| s(&p["title"]).chars().count())
        .max()
        .unwrap_or(0);
    for p in pages(pages_answer) {
        let copy = p["copy_of"]
            .as_u64()
            .map(|c| format!("  (a draft copy of page {c})"))
            .unwrap_or_default();
        n.fact(format!(
            "  page {}  {:<width$}  {}{copy}",
            p["id"],
            s(&p["title"]),
            s(&p["status"]),
        ));
    }
    let items: Vec<String> = main_menu(menus_answer)
        .iter()
        .map(|i| format!("{} ({})", s(&i["label"]), s(&i["url"])))
        .collect();
    n.fact(format!("Main menu: {}", items.join(" · ")));
}

fn lands_on(step: &Value) -> String {
    let l = &step["lands_on"];
    let target = l["target"].as_str();
    let place = match (s(&l["where"]), target) {
        ("copy", Some(t)) => format!("a copy (target {t}), not the live item"),
        ("copy", None) => "a copy, not the live item".to_owned(),
        (_, Some(t)) => format!("the live site (target {t}), at once when applied"),
        (_, None) => "the live site, at once when applied".to_owned(),
    };
    match l["note"].as_str() {
        Some(note) => format!("{place} — {note}"),
        None => place,
    }
}

/// The story, chapter by chapter: the agent's calls and what they show.
async fn tell(
    n: &mut Narrator,
    (client, gw, key): (&Client, &Gateway, &plangate_store::ApiKey),
    tmp: &std::path::Path,
) -> Result<()> {
    n.fact("plangate demo — plan mode, start to finish, in one run");
    n.fact("=====================================================");
    n.fact("An agent is connected to plangate instead of straight to a website's MCP server.");
    n.fact("In plan mode, reads run but every write becomes a plan step: a question for a person.");
    n.fact(
        "Nothing is written until the person says yes; then plangate applies the steps, in order,",
    );
    n.fact("at most once each, and hands back a receipt.");
    n.fact(format!(
        "Everything below is real (gateway, event log, MCP client, demo site) and lives in a temporary directory: {}",
        tmp.display()
    ));

    n.heading("The site before (reads pass straight through)");
    let pages_before = n
        .call(client, "site_before", "list_pages", json!({}))
        .await?;
    let menus_before = n
        .call(client, "site_before", "list_menus", json!({}))
        .await?;
    show_site(n, &pages_before, &menus_before);

    begin_plan_mode(n, client).await?;
    plan_three_writes(n, client).await?;
    let digest = show_plan(n, client, &pages_before, &menus_before).await?;
    let copy_id = say_yes_and_apply(n, (client, gw, key), &digest).await?;
    site_after(n, client, copy_id).await?;
    end_session(n, client).await
}

/// The agent begins plan mode, and how long its plan lives.
async fn begin_plan_mode(n: &mut Narrator, client: &Client) -> Result<()> {
    n.heading("The agent begins plan mode");
    let begun = n
        .call(
            client,
            "begin_plan_mode",
            "plangate_begin_session",
            json!({"mode": "plan"}),
        )
        .await?;
    n.fact(format!(
        "Mode: {} (plan mode: {}). Reads run; every write is planned, not run.",
        s(&begun["mode"]),
        begun["plan_mode"]
    ));
    if let Some(secs) = begun["expires_in"].as_i64() {
        n.fact(format!(
            "The plan lives for {} unless it is applied or the session ends.",
            crate::plans::human_secs(secs)
        ));
    }
    Ok(())
}

/// Three writes the agent asks for, each planned as a step: nothing written.
async fn plan_three_writes(n: &mut Narrator, client: &Client) -> Result<()> {
    n.heading("The agent asks for three writes; each becomes a plan step");
    let writes = [
        (
            "update_page",
            json!({"id": 2, "title": "Our story"}),
            "update the About page's title to \"Our story\"",
        ),
        (
            "create_menu_item",
            json!({"menu": "main", "label": "Services", "url": "/services"}),
            "add a Services link to the main menu",
        ),
        (
            "delete_page",
            json!({"id": 3}),
            "delete the old Team draft (page 3)",
        ),
    ];
    for (i, (tool, args, why)) in writes.into_iter().enumerate() {
        if i > 0 {
            n.fact("");
        }
        n.fact(format!("The agent wants to {why}:"));
        let step = n.call(client, "plan", tool, args).await?;
        n.fact(format!(
            "  planned as step {} ({}); written: nothing (mutation_performed: {})",
            step["position"],
            s(&step["step_id"]),
            step["mutation_performed"]
        ));
        n.fact(format!(
            "  predicted effect: {}",
            s(&step["predicted_effect"])
        ));
        n.fact(format!("  lands on: {}", lands_on(&step)));
        if step["approval_required"] == true {
            n.fact(format!(
                "  approval: REQUIRED — {}",
                s(&step["approval_note"])
            ));
        } else {
            n.fact("  approval: no extra approval; it runs only with the person's yes to the plan");
        }
    }
    Ok(())
}

/// The site unchanged by the planned writes, and the plan as `get_plan`
/// shows it to the person: its digest, for the yes.
async fn show_plan(
    n: &mut Narrator,
    client: &Client,
    pages_before: &Value,
    menus_before: &Value,
) -> Result<String> {
    n.heading("The site is unchanged");
    let pages_now = n
        .call(client, "site_unchanged", "list_pages", json!({}))
        .await?;
    let menus_now = n
        .call(client, "site_unchanged", "list_menus", json!({}))
        .await?;
    if &pages_now != pages_before || &menus_now != menus_before {
        bail!("the site changed while the writes were only planned; this is a bug in plangate");
    }
    n.fact(
        "Pages and main menu read back exactly as before: three writes asked for, none written.",
    );

    n.heading("The agent shows the person the plan (plangate_get_plan)");
    let plan = n
        .call(client, "show_plan", "plangate_get_plan", json!({}))
        .await?;
    for step in plan["steps"].as_array().into_iter().flatten() {
        n.fact(format!(
            "  {}. [{}] {} — {}{}",
            step["position"],
            s(&step["status"]),
            s(&step["predicted_effect"]),
            if step["lands_on"]["where"] == "copy" {
                "lands on a copy"
            } else {
                "lands live"
            },
            if step["approval_required"] == true {
                "; destructive: needs an explicit yes"
            } else {
                ""
            }
        ));
    }
    let digest = s(&plan["plan_digest"]).to_owned();
    n.fact(format!("Waiting steps: {}", plan["pending_steps"]));
    n.fact(format!(
        "Plan digest: {digest} (a fingerprint of exactly these steps)"
    ));
    Ok(digest)
}

/// The agent's own apply refused (its key plans; only a person
/// approves), the person's yes (simulated, through the same operation as
/// `plangate plans approve` and the console's Approve), then the agent's
/// apply and its receipt: the draft copy a step landed on, if one did.
async fn say_yes_and_apply(
    n: &mut Narrator,
    (client, gw, key): (&Client, &Gateway, &plangate_store::ApiKey),
    digest: &str,
) -> Result<Option<String>> {
    n.heading("The agent tries to apply its own plan: refused");
    let mut params = CallToolRequestParams::new("plangate_apply_plan");
    params.arguments = json!({"plan_digest": digest}).as_object().cloned();
    let refused = client
        .peer()
        .call_tool(params)
        .await
        .context("the demo's call to plangate_apply_plan failed")?;
    let code = refused
        .structured_content
        .as_ref()
        .map(|v| s(&v["code"]).to_owned())
        .unwrap_or_default();
    n.record(json!({
        "phase": "agent_apply_refused",
        "tool": "plangate_apply_plan",
        "arguments": {"plan_digest": digest},
        "is_error": refused.is_error == Some(true),
        "code": code,
    }))?;
    if refused.is_error != Some(true) {
        bail!("the agent's own apply of an unapproved plan ran");
    }
    n.fact(format!(
        "Refused ({code}): its key plans every write, and nothing it can call approves the plan."
    ));

    n.heading("The person says yes — SIMULATED");
    let act = factor::Act::Approve { key: &key.name };
    let yes = factor::confirm(
        gw.operators(),
        gw.material(),
        &act,
        factor::Proof::default(),
        Channel::Cli,
    )
    .await
    .map_err(|e| anyhow!("{e}"))?;
    let person = Actor::Operator {
        name: "you (simulated)".to_owned(),
    };
    let seen = Some(operator::Seen::digest(digest));
    operator::approve(gw.log(), key, person, &yes, Channel::Cli, seen, &[])
        .await
        .map_err(|e| anyhow!("{e}"))?;
    n.record(json!({
        "phase": "person_says_yes",
        "simulated": true,
        "plan_digest": digest,
        "message": "SIMULATED: the demo approves on the person's behalf, for exactly this digest",
    }))?;
    n.fact(
        "SIMULATED: in real use the agent stops here, shows the person this plan in plain words",
    );
    n.fact("and waits; the person approves in the web console or with `plangate plans approve`.");
    n.fact("This demo approves on the person's behalf, for exactly this digest:");
    n.fact(format!("  {digest}"));
    n.fact("If any step changed after the yes, the digest would not match and nothing would run.");

    n.heading("The agent applies the approved plan (plangate_apply_plan)");
    let receipt = n
        .call(
            client,
            "apply",
            "plangate_apply_plan",
            json!({"plan_digest": digest}),
        )
        .await?;
    n.fact(format!("Receipt: {}", s(&receipt["message"])));
    n.fact(format!(
        "  applied {}, failed {}, in doubt {}, not run {}",
        receipt["applied"], receipt["failed"], receipt["in_doubt"], receipt["not_run"]
    ));
    let mut copy_id = None;
    for step in receipt["steps"].as_array().into_iter().flatten() {
        let mut facts = Vec::new();
        if let Some(c) = step["copy_id"].as_str() {
            facts.push(format!("landed on copy {c}"));
            copy_id = Some(c.to_owned());
        }
        for link in step["links"].as_array().into_iter().flatten() {
            facts.push(format!("preview {}", s(link)));
        }
        if let Some(item) = step["result"]["menu_item_id"].as_u64() {
            facts.push(format!("menu item id {item}"));
        }
        for snap in step["snapshots"].as_array().into_iter().flatten() {
            facts.push(format!("snapshot id {} (it can be restored)", s(snap)));
        }
        n.fact(format!(
            "  step {}: {} — {}",
            step["position"],
            s(&step["outcome"]),
            facts.join("; ")
        ));
    }
    n.fact("  every step ran on the person's yes, the destructive one too");
    if receipt["success"] != true {
        bail!("the plan did not apply cleanly: {}", s(&receipt["message"]));
    }
    Ok(copy_id)
}

/// The site after the apply: the live page unchanged where a step landed
/// on a draft copy.
async fn site_after(n: &mut Narrator, client: &Client, copy_id: Option<String>) -> Result<()> {
    n.heading("The site after");
    let pages_after = n
        .call(client, "site_after", "list_pages", json!({}))
        .await?;
    let menus_after = n
        .call(client, "site_after", "list_menus", json!({}))
        .await?;
    show_site(n, &pages_after, &menus_after);
    let live_title = pages(&pages_after)
        .iter()
        .find(|p| p["id"] == 2)
        .map(|p| s(&p["title"]).to_owned())
        .unwrap_or_default();
    if let Some(c) = copy_id {
        n.fact(format!(
            "The live page 2 still reads {live_title:?}: \"Our story\" waits on draft copy {c} until someone publishes it."
        ));
    }
    Ok(())
}

/// The agent ends its session: back to the default mode.
async fn end_session(n: &mut Narrator, client: &Client) -> Result<()> {
    n.heading("The agent ends the session (plangate_end_session)");
    let ended = n
        .call(client, "end_session", "plangate_end_session", json!({}))
        .await?;
    n.fact(format!(
        "Mode is back to default; {} waiting step(s) dropped.",
        ended["discarded_steps"]
    ));
    Ok(())
}
