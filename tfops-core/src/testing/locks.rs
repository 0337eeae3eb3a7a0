//! State locks as a crashed Terraform or a dead runner leaves them, arranged in the world.

use super::FakeWorld;
use crate::api::ObjectKey;

impl FakeWorld {
    /// Holds the object's state lock, as a crashed Terraform would leave it.
    pub fn lock_state(&self, key: &ObjectKey, lock_id: &str, holder: &str) {
        let mut w = self.lock();
        let infra = w.infra.entry(key.clone()).or_default();
        infra.lock = Some((lock_id.into(), holder.into()));
        infra.lock_holder_gone = false;
        infra.lock_at_init = false;
    }

    /// Holds the object's state lock as a dead process of the object's own runner left it:
    /// the runner that finds it proves its holder gone (it names the runner's own host).
    pub fn lock_state_of_dead_runner(&self, key: &ObjectKey, lock_id: &str) {
        let pod = crate::naming::runner_pod_name(&key.name);
        self.lock_state_as(key, &pod, lock_id, true);
    }

    /// Holds the object's state lock as a dead process of the object's own runner left it
    /// in `init`, writing the workspace's first state: every later `init` stops on it.
    pub fn lock_state_at_init_of_dead_runner(&self, key: &ObjectKey, lock_id: &str) {
        self.lock_state_of_dead_runner(key, lock_id);
        let mut w = self.lock();
        w.infra.entry(key.clone()).or_default().lock_at_init = true;
    }

    /// Holds the object's state lock as a process of the runner Pod `pod` took it; `proved`:
    /// the runner that finds it proves its holder gone.
    fn lock_state_as(&self, key: &ObjectKey, pod: &str, lock_id: &str, proved: bool) {
        let mut w = self.lock();
        let holder = format!("runner@{}", crate::naming::runner_host(&key.namespace, pod));
        let infra = w.infra.entry(key.clone()).or_default();
        infra.lock = Some((lock_id.into(), holder));
        infra.lock_holder_gone = proved;
        infra.lock_at_init = false;
    }

    /// Holds the object's state lock as its apply runner (`spec.runner.apply`) took it, that
    /// runner's Pod still there (`alive`: perhaps applying) or gone (deleted mid-apply). The
    /// plan runner that finds it cannot prove its holder gone.
    pub fn lock_state_of_apply_runner(&self, key: &ObjectKey, lock_id: &str, alive: bool) {
        let pod = crate::naming::apply_runner_pod_name(&key.name);
        self.lock_state_as(key, &pod, lock_id, false);
        let mut w = self.lock();
        if alive {
            w.live_apply_runners.insert(key.clone());
        } else {
            w.live_apply_runners.remove(key);
        }
    }
}
