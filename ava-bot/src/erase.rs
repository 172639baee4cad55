//! Erasing a person (`ava erase`, the bot's `/erase`): the facade's
//! [`ava_memory::erase`], the one definition of what it takes, and the lease names it ends.

pub(crate) use ava_memory::erase::{confirmation_lease, delete_each, erase_person};

#[cfg(test)]
mod tests {
    use memory_core::Scope;

    /// The agent and the upkeep name their leases themselves until they build on the facade
    /// (issue 57, phase 2); erasing ends the names the facade gives, so they must agree.
    #[test]
    fn the_leases_erasing_ends_are_those_the_agent_and_the_upkeep_take() -> anyhow::Result<()> {
        let scope = Scope::for_user("42")?.in_chat("7")?;
        assert_eq!(
            crate::agent::learning_lease(&scope),
            ava_memory::erase::learning_lease(&scope)
        );
        assert_eq!(
            crate::upkeep::pruning_lease(&scope),
            ava_memory::erase::pruning_lease(&scope)
        );
        assert_eq!(crate::agent::GROUP_USER, ava_memory::erase::GROUP_USER);
        Ok(())
    }
}
