//! Tags of a resource by its ARN: `ListTagsForResource`, `TagResource`,
//! `UntagResource`.

use super::*;

impl Endpoint {
    fn tag_target(&self, arn: &str) -> AwsResult<crate::arn::Target> {
        self.arns
            .parse(arn)
            .map_err(|m| AwsError::invalid("resourceArn", m))
    }

    pub(crate) async fn list_tags(&self, cx: &Ctx<'_>, arn: &str) -> AwsResult<Value> {
        let t = self.tag_target(arn)?;
        if let crate::arn::Target::Job(_) = &t {
            let j = self.job_seen(cx, arn).await?;
            return Ok(json!({ "tags": super::jobs::shown_tags(&j) }));
        }
        let st = cx.state().await?;
        let key = t.tag_key().expect("an object's key");
        if !st.tagged_object_exists(&key) {
            return Err(AwsError::client(format!("resource {arn} does not exist")));
        }
        let tags = tags_json(&st, Some(key));
        Ok(json!({ "tags": tags }))
    }

    pub(crate) async fn tag(&self, cx: &Ctx<'_>, arn: &str, body: &[u8]) -> AwsResult<Value> {
        #[derive(Deserialize)]
        struct TagBody {
            tags: Option<BTreeMap<String, String>>,
        }
        let r: TagBody = parse(body)?;
        let tags = required(&r.tags, "tags")?.clone();
        validate_tags(&tags, "tags").map_err(|e| AwsError::invalid(&e.field, e.rule))?;
        refuse_reserved_tag("tags", tags.keys())?;
        let resource = self.tag_target(arn)?.tag_key().ok_or_else(|| {
            AwsError::invalid(
                "resourceArn",
                "a service job's tags are set when it is submitted",
            )
        })?;
        cx.write(ClientCommand::TagResource { resource, tags })
            .await?;
        Ok(json!({}))
    }

    pub(crate) async fn untag(
        &self,
        cx: &Ctx<'_>,
        arn: &str,
        keys: Vec<String>,
    ) -> AwsResult<Value> {
        if keys.is_empty() {
            return Err(AwsError::invalid("tagKeys", "is required"));
        }
        refuse_reserved_tag("tagKeys", keys.iter())?;
        let resource = self.tag_target(arn)?.tag_key().ok_or_else(|| {
            AwsError::invalid(
                "resourceArn",
                "a service job's tags are set when it is submitted",
            )
        })?;
        cx.write(ClientCommand::UntagResource { resource, keys })
            .await?;
        Ok(json!({}))
    }
}
