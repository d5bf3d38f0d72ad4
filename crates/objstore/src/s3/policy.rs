//! Bucket policies: the JSON documents of PutBucketPolicy, and their evaluation for
//! anonymous requests (public read). Authenticated requests are not limited by policies
//! (every access key has full access); statements with a `Condition` never grant
//! anything (conditions are not evaluated), but a matching Deny always denies.

use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketPolicy {
    statements: Vec<Statement>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Statement {
    allow: bool,
    anyone: bool,
    actions: Vec<String>,
    resources: Vec<String>,
    conditional: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Document {
    #[serde(default)]
    version: Option<String>,
    statement: OneOrMany<RawStatement>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany<T> {
    One(T),
    Many(Vec<T>),
}

impl<T> OneOrMany<T> {
    fn into_vec(self) -> Vec<T> {
        match self {
            OneOrMany::One(t) => vec![t],
            OneOrMany::Many(v) => v,
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct RawStatement {
    effect: String,
    principal: Option<Value>,
    action: OneOrMany<String>,
    resource: OneOrMany<String>,
    condition: Option<Value>,
}

fn principal_is_anyone(p: &Value) -> bool {
    match p {
        Value::String(s) => s == "*",
        Value::Object(m) => m.get("AWS").is_some_and(|v| match v {
            Value::String(s) => s == "*",
            Value::Array(a) => a.iter().any(|x| x.as_str() == Some("*")),
            _ => false,
        }),
        _ => false,
    }
}

impl BucketPolicy {
    /// Parses a policy for `bucket`; the error is the message S3 returns with
    /// MalformedPolicy.
    pub fn parse(text: &str, bucket: &str) -> Result<Self, String> {
        let doc: Document =
            serde_json::from_str(text).map_err(|e| format!("Policies must be valid JSON: {e}"))?;
        if let Some(v) = &doc.version
            && v != "2012-10-17"
            && v != "2008-10-17"
        {
            return Err(format!("Invalid policy version {v}"));
        }
        let mut statements = Vec::new();
        for s in doc.statement.into_vec() {
            let allow = match s.effect.as_str() {
                "Allow" => true,
                "Deny" => false,
                other => return Err(format!("Invalid effect: {other}")),
            };
            let principal = s.principal.ok_or("Missing required field Principal")?;
            let actions = s.action.into_vec();
            for a in &actions {
                if !(a == "*" || a.starts_with("s3:")) {
                    return Err(format!("Policy has invalid action: {a}"));
                }
            }
            let resources = s.resource.into_vec();
            for r in &resources {
                let Some(rest) = r.strip_prefix("arn:aws:s3:::") else {
                    return Err(format!("Policy has invalid resource: {r}"));
                };
                let name = rest.split('/').next().unwrap_or_default();
                if !glob(name, bucket) {
                    return Err("Policy has invalid resource".to_string());
                }
            }
            statements.push(Statement {
                allow,
                anyone: principal_is_anyone(&principal),
                actions,
                resources,
                conditional: s
                    .condition
                    .is_some_and(|c| !c.as_object().is_some_and(|m| m.is_empty())),
            });
        }
        Ok(BucketPolicy { statements })
    }

    /// Whether an anonymous request for `action` (`s3:GetObject`) on `resource`
    /// (`arn:aws:s3:::bucket/key`) is allowed.
    pub fn allows_anonymous(&self, action: &str, resource: &str) -> bool {
        let matching = |s: &&Statement| {
            s.anyone
                && s.actions.iter().any(|a| glob(a, action))
                && s.resources.iter().any(|r| glob(r, resource))
        };
        if self
            .statements
            .iter()
            .filter(|s| !s.allow)
            .any(|s| matching(&s))
        {
            return false;
        }
        self.statements
            .iter()
            .filter(|s| s.allow && !s.conditional)
            .any(|s| matching(&s))
    }
}

/// IAM wildcard match: `*` any run of characters, `?` any one character.
pub fn glob(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PUBLIC_READ: &str = r#"{
        "Version": "2012-10-17",
        "Statement": [{
            "Sid": "PublicRead",
            "Effect": "Allow",
            "Principal": "*",
            "Action": ["s3:GetObject"],
            "Resource": "arn:aws:s3:::pub/*"
        }, {
            "Effect": "Deny",
            "Principal": {"AWS": ["*"]},
            "Action": "s3:GetObject",
            "Resource": "arn:aws:s3:::pub/secret/*"
        }]
    }"#;

    #[test]
    fn public_read_with_a_denied_subtree() {
        let p = BucketPolicy::parse(PUBLIC_READ, "pub").expect("valid");
        assert!(p.allows_anonymous("s3:GetObject", "arn:aws:s3:::pub/a/b.txt"));
        assert!(!p.allows_anonymous("s3:GetObject", "arn:aws:s3:::pub/secret/x"));
        assert!(!p.allows_anonymous("s3:PutObject", "arn:aws:s3:::pub/a"));
        assert!(!p.allows_anonymous("s3:ListBucket", "arn:aws:s3:::pub"));
    }

    #[test]
    fn malformed_policies_are_refused() {
        assert!(BucketPolicy::parse("{", "b").is_err());
        assert!(BucketPolicy::parse(r#"{"Statement":[{"Effect":"Maybe","Principal":"*","Action":"s3:*","Resource":"arn:aws:s3:::b"}]}"#, "b").is_err());
        assert!(BucketPolicy::parse(r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:*","Resource":"arn:aws:s3:::other/*"}]}"#, "b").is_err());
        assert!(
            BucketPolicy::parse(
                r#"{"Statement":[{"Effect":"Allow","Action":"s3:*","Resource":"arn:aws:s3:::b"}]}"#,
                "b"
            )
            .is_err()
        );
    }

    #[test]
    fn conditions_never_grant() {
        let p = BucketPolicy::parse(
            r#"{"Statement":{"Effect":"Allow","Principal":"*","Action":"s3:Get*","Resource":"arn:aws:s3:::b/*","Condition":{"IpAddress":{"aws:SourceIp":"10.0.0.0/8"}}}}"#,
            "b",
        )
        .expect("valid");
        assert!(!p.allows_anonymous("s3:GetObject", "arn:aws:s3:::b/k"));
    }

    #[test]
    fn globs() {
        assert!(glob("s3:Get*", "s3:GetObject"));
        assert!(glob("a?c*", "abcdef"));
        assert!(!glob("a?c", "ac"));
        assert!(glob("*", ""));
    }
}
